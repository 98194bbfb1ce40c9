"""The segmentation family's importers: ultralytics segment ONNX exports and .pt checkpoints, their two outputs
packed into one row (pack.py), made batch-dynamic and proved, verified against ultralytics' own segment predictor
(boxes AND masks), published through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  onnx_graph  segmentation-onnx  an ultralytics segment ONNX export (e.g. platedet's YOLOv8s-seg), INT8 fallback
  checkpoint  segmentation-pt    an ultralytics segment .pt, exported with its mask branch
  plates      plates-default     the default plate segmenter (platedet's YOLOv8s-seg ONNX)

BUILDS_ON: the families whose importers these reuse (a segment head IS a Detect head plus mask coefficients and
prototypes: checkpoint loading, export, letterbox, capped NMS, batch rewrite and proofs and INT8 node selection are
the detection family's, not copies). tests/families/test_importer_boundaries.py allows exactly these.
"""

IMPORTERS = (
    "triserve.families.segmentation.importers.onnx_graph",
    "triserve.families.segmentation.importers.checkpoint",
    "triserve.families.segmentation.importers.plates",
)
BUILDS_ON = ("triserve.families.detection",)
