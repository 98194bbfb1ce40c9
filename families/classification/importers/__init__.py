"""The image classification family's importers, each verified against the framework it came from and published
through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  onnx_graph  classification-onnx  any ONNX ImageNet-style classifier + its labels and declared normalisation
  checkpoint  classification-pt    an ultralytics -cls checkpoint (.pt), exported and verified against ultralytics
What they share: finish (batch-dynamic proof, the served path's probabilities, the gated INT8 fallback, the drift
references). BUILDS_ON: the detection family's ultralytics reader and offline setup (its checkpoint loader refuses
-cls checkpoints and names classification-pt).
"""

IMPORTERS = (
    "triserve.families.classification.importers.onnx_graph",
    "triserve.families.classification.importers.checkpoint",
)
BUILDS_ON = ("triserve.families.detection",)
