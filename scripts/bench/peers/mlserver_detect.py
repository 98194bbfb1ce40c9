"""Peer for scripts/bench/compare_detect.py: the detector behind MLServer (`mlserver` on PyPI) as a custom runtime
(`mlserver.MLModel`: load() and predict()) around the same ONNX session (scripts/bench/peers/common.py session); per
batch it does what the naive peer does per request (scripts/bench/peers/pipelines.py Detector: base64 and safe image
decode, letterbox, one ONNX Runtime call for the whole batch, capped NMS with the family's default limits, boxes
back to original pixels).

Batching: MLServer's adaptive batching, ON: max_batch_size 16 (triserve's detection slot; the harness passes
--pytriton-max-batch, the PyTriton peer's) and max_batch_time (--mlserver-batch-time-ms); see
scripts/bench/peers/mlserver_text.py for how MLServer merges and splits.

Runs in the MLServer venv of scripts/bench/peers/mlserver_text.py (its recipe installs OpenCV and Pillow too), started
by the harness as `mlserver start <folder>` with the checkout on PYTHONPATH.

HTTP (V2 inference protocol, the PyTriton peer's body and answer): POST /v2/models/detector/infer {"inputs": [{"name":
"image", "shape": [1, 1], "datatype": "BYTES", "data": ["<base64 JPEG>"]}]} -> outputs "count" [1, 1] INT32, "boxes"
[1, k, 4] FP32 (x1, y1, x2, y2, original pixels), "scores" [1, k] FP32, "classes" [1, k] INT32; k is the largest count
in the batch the request was part of, rows past "count" are padding.
"""
from __future__ import annotations

from pathlib import Path

from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse

from scripts.bench.peers.common import read_manifest, session
from scripts.bench.peers.pipelines import Detector, padded_detections
from triserve.kernel.errors import ApiError


class DetectorRuntime(MLModel):
    async def load(self) -> bool:
        params = self.settings.parameters
        assert params is not None and params.uri, "model-settings.json parameters.uri: the model directory"
        model_dir = Path(params.uri)
        manifest = read_manifest(model_dir)
        intra = int((params.extra or {}).get("intra_op", 0))
        self.detect = Detector(manifest, session(model_dir, manifest, intra))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        b64s = StringCodec.decode_input(payload.inputs[0]) if payload.inputs else []
        if not b64s or payload.inputs[0].datatype != "BYTES" or not all(isinstance(s, str) and s for s in b64s):
            raise InferenceError('expected one BYTES input of base64 images, e.g. {"inputs": [{"name": "image", '
                                 '"shape": [1, 1], "datatype": "BYTES", "data": ["<base64 JPEG>"]}]}')
        try:
            dets = self.detect(b64s)
        except ApiError as exc:  # an undecodable or oversized image: the family's own check, a 400
            raise InferenceError(f"{exc.code}: {exc.message}") from exc
        return InferenceResponse(model_name=self.name, outputs=[
            NumpyCodec.encode_output(name, arr) for name, arr in padded_detections(dets).items()])
