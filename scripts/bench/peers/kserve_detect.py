"""Peer for scripts/bench/compare_detect.py: the detector behind KServe's Python model server (`kserve` on PyPI), as a
KServe user writes a custom predictor: a `kserve.Model` subclass, load() and a V1 predict(). Per request it does what
the naive peer does (scripts/bench/peers/pipelines.py Detector, the project's families/detection functions): base64
and safe image decode, letterbox, one ONNX Runtime call, capped NMS with the family's default limits, boxes back to
original pixels. Same model file and session options (scripts/bench/peers/common.py session).

Batching: none (KServe's Python server has no dynamic batcher; see scripts/bench/peers/kserve_text.py).

Runs in the KServe venv of scripts/bench/peers/kserve_text.py (its recipe installs OpenCV and Pillow too):

    .cache/peers/kserve/bin/python scripts/bench/peers/kserve_detect.py --http-port 8300 --model-dir DIR --intra-op 1

HTTP (KServe V1, binary data as {"b64": ...}, the TensorFlow-Serving convention KServe's V1 follows):
POST /v1/models/detector:predict {"instances": [{"image_bytes": {"b64": "<base64 JPEG>"}}]} -> {"predictions":
[{"detections": [{"box": [x1, y1, x2, y2], "score", "class_id", "label"}, ...]}]}; GET /v1/models/detector is 200
once loaded.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kserve import Model
from kserve.errors import InvalidInput

# run as a script from its own venv: the project's detection functions and the peers' helpers come from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scripts.bench.peers.common import kserve_parser, read_manifest, serve_kserve, session
from scripts.bench.peers.pipelines import Detector
from triserve.kernel.errors import ApiError

NAME = "detector"


def images_of(payload: Any) -> list[str]:
    """The base64 strings of a V1 body, or InvalidInput (a 400 before the model runs)."""
    instances = payload.get("instances") if isinstance(payload, dict) else None
    try:
        b64s = [inst["image_bytes"]["b64"] for inst in instances or []]
    except (TypeError, KeyError):
        b64s = []
    if not b64s or not all(isinstance(s, str) and s for s in b64s):
        raise InvalidInput('expected {"instances": [{"image_bytes": {"b64": "<base64 image>"}}, ...]}')
    return b64s


class DetectorModel(Model):
    def __init__(self, model_dir: Path, intra_op: int):
        super().__init__(NAME)
        self.model_dir, self.intra_op = model_dir, intra_op
        self.detect: Detector | None = None
        self.load()

    def load(self) -> bool:
        manifest = read_manifest(self.model_dir)
        self.detect = Detector(manifest, session(self.model_dir, manifest, self.intra_op))
        self.ready = True
        return self.ready

    def predict(self, payload: Any, headers: dict[str, str] | None = None) -> dict:
        assert self.detect is not None
        try:
            dets = self.detect(images_of(payload))
        except ApiError as exc:  # an undecodable or oversized image: the family's own check, a 400
            raise InvalidInput(f"{exc.code}: {exc.message}") from exc
        return {"predictions": [{"detections": [
            {"box": box, "score": score, "class_id": cls, "label": self.detect.label(cls)} for cls, box, score in d]}
            for d in dets]}


def main() -> None:
    args = kserve_parser().parse_args()
    serve_kserve(DetectorModel(args.model_dir, args.intra_op), args.http_port)


if __name__ == "__main__":
    main()
