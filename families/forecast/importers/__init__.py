"""The forecast family's importer: a user's window forecaster (one window in, a point or quantile forecast out),
proved through the family's served path and published through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  onnx_graph  forecast-onnx   an ONNX window forecaster (contract "window")
"""

IMPORTERS = ("triserve.families.forecast.importers.onnx_graph",)
