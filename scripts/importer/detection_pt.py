"""`python -m scripts.importer detection-pt`: an ultralytics detection .pt, through the existing exporter.

The work (ONNX export with dynamic batch/size, torch-vs-ONNX Runtime parity on batches 1/4/32, optional mAP on a data
yaml, publish) is scripts/detection/build.py's export_user_model / publish_user_model; this module only gives it a
subcommand beside the other importers.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("triserve.importer")


def _cmd(args) -> int:
    from models.registry import LocalRegistry, RegistryError
    from scripts.common import GateFailed
    from scripts.detection.build import publish_user_model
    from scripts.importer.detection_onnx import quiet_stdout

    try:
        with quiet_stdout():
            m = publish_user_model(args.weights, args.name, args.version, LocalRegistry(args.registry),
                                   imgsz=args.imgsz, data=args.data, alias=args.alias, cache_dir=args.cache)
    except (GateFailed, RegistryError, ValueError) as exc:
        log.error("nothing published: %s", exc)
        return 2
    print(json.dumps({"name": m.name, "version": m.version, "labels": m.labels, "metrics": m.metrics,
                      "parity_max_abs_diff": max((c.max_abs_diff for c in m.parity), default=None)}, indent=2))
    return 0


def add_parser(subparsers) -> None:
    from scripts.importer.detection_onnx import DEFAULT_CACHE, default_registry

    p = subparsers.add_parser("detection-pt", help="import an ultralytics detection .pt (scripts/detection/build.py)")
    p.add_argument("--weights", type=Path, required=True, help="the .pt checkpoint")
    p.add_argument("--name", required=True, help="registry model name")
    p.add_argument("--version", required=True, help="immutable version")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size (default: the checkpoint's train imgsz)")
    p.add_argument("--data", type=Path, default=None, help="ultralytics data yaml to score the model on")
    p.add_argument("--registry", type=Path, default=default_registry(),
                   help="registry root (default: $TRISERVE_REGISTRY_DIR or models/store)")
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "detection-pt", help="ultralytics config/cache dir")
    p.set_defaults(func=_cmd)
