"""Peer for scripts/bench/compare.py: the intent model behind MLServer (`mlserver` on PyPI, Seldon's V2 inference
server) as a custom runtime: an `mlserver.MLModel` subclass whose load() opens the same ONNX file with the same
session options (scripts/bench/peers/common.py session) and tokenizer (families/text/preprocess.TextTokenizer), and
whose predict() classifies a batch of texts (scripts/bench/peers/pipelines.py TextClassifier).

Batching: MLServer's adaptive batching, ON: model-settings.json max_batch_size (64, as triserve's text slot and the
PyTriton peer) and max_batch_time (seconds; --mlserver-batch-time-ms, default 2 ms). MLServer merges the waiting V2
requests into one InferenceRequest (inputs concatenated along axis 0), calls predict() once, and splits every output
along axis 0 again (mlserver/batching/adaptive.py, requests.py). A batch is sent when full or when max_batch_time has
passed since its first request, so at c=1 each request waits max_batch_time.

Runs in its own venv (mlserver pins its fastapi/pydantic/uvicorn), started by the harness as `mlserver start <folder>`
with the checkout on PYTHONPATH (settings written by scripts/bench/peers/mlserver_settings.py).
uvloop stays at 0.21: with uvloop 0.23 (what pip picks for mlserver 1.7.1) every inference worker dies at start
("There is no current event loop in thread 'MainThread'", mlserver/parallel/worker.py _ignore_signals) and no model
loads:

    python3.11 -m venv .cache/peers/mlserver && .cache/peers/mlserver/bin/pip install mlserver==1.7.1 \\
        uvloop==0.21.0 onnxruntime==1.32.0 tokenizers==0.23.3 numpy==2.4.6 opencv-python-headless==5.1.0.95 \\
        pillow==13.0.0
    PYTHONPATH=$PWD .cache/peers/mlserver/bin/mlserver start <folder with settings.json and intent/model-settings.json>

HTTP (V2 inference protocol, the PyTriton peer's body): POST /v2/models/intent/infer {"inputs": [{"name": "text",
"shape": [1, 1], "datatype": "BYTES", "data": ["play jazz"]}]} -> outputs "labels" [1, 3] BYTES and "scores" [1, 3]
FP32 (top-3, best first); GET /v2/models/intent/ready is 200 once loaded.
"""
from __future__ import annotations

from pathlib import Path

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

from scripts.bench.peers.common import read_manifest, session
from scripts.bench.peers.pipelines import TextClassifier

TOP_K = 3  # what the harness asks the naive peer for


class IntentRuntime(MLModel):
    async def load(self) -> bool:
        params = self.settings.parameters
        assert params is not None and params.uri, "model-settings.json parameters.uri: the model directory"
        model_dir = Path(params.uri)
        manifest = read_manifest(model_dir)
        intra = int((params.extra or {}).get("intra_op", 0))
        self.classify = TextClassifier(model_dir, manifest, session(model_dir, manifest, intra), TOP_K)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        texts = [t for t in StringCodec.decode_input(payload.inputs[0])] if payload.inputs else []
        if not texts or payload.inputs[0].datatype != "BYTES" or not all(isinstance(t, str) and t for t in texts):
            raise InferenceError('expected one BYTES input of non-empty strings, e.g. {"inputs": [{"name": "text", '
                                 '"shape": [1, 1], "datatype": "BYTES", "data": ["play jazz"]}]}')
        results = self.classify(texts)
        shape = [len(results), TOP_K]
        return InferenceResponse(model_name=self.name, outputs=[
            ResponseOutput(name="labels", shape=shape, datatype="BYTES",
                           data=[label for r in results for label, _ in r.top_k]),
            ResponseOutput(name="scores", shape=shape, datatype="FP32",
                           data=[score for r in results for _, score in r.top_k])])
