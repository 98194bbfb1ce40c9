"""Importers: bring models made elsewhere into the registry, checked, proved and verified against their framework.

Public (callers may import these):
  scripts.importer.detection_onnx  inspect_detector, import_detection_onnx, publish_detection_onnx,
                                   build_default_coco, read_labels, ImportRefused, ImportParams, FallbackGates
  scripts.importer.batching        make_batch_dynamic, prove_dynamic_batch
  scripts.importer.verify          verify_against_ultralytics, ultralytics_predictions
  scripts.importer.agreement       run_detector, agreement, match
  scripts.importer.photos          package_photos, user_photos
  scripts.importer.wheels          download_wheel, extract_member, read_member

The CLI (`python -m scripts.importer SUBCOMMAND`) is assembled from IMPORTERS: each module there has
`add_parser(subparsers)` that registers its subcommands and sets `func(args) -> exit code`. Another family's importer
adds itself by adding its module name here.
"""

IMPORTERS = (
    "scripts.importer.detection_onnx",  # detection-onnx, coco-default
    "scripts.importer.detection_pt",  # detection-pt
    "scripts.importer.text_hf",  # text-hf
    "scripts.importer.text_onnx",  # text-onnx
    "scripts.importer.text_sklearn",  # text-sklearn
    "scripts.importer.forecast_onnx",  # forecast-onnx
)
