"""Peer for scripts/bench/compare.py: the intent model behind KServe's Python model server (`kserve` on PyPI), as a
KServe user writes a custom predictor: a `kserve.Model` subclass whose load() opens the model and whose predict()
answers the V1 protocol. Same model file, tokenizer (families/text/preprocess.TextTokenizer) and session options
(scripts/bench/peers/common.py session) as the naive peer; scripts/bench/peers/pipelines.py does the work.

Batching: none. KServe's Python server (kserve 0.21: kserve/model_server.py, protocol/rest) has no dynamic batcher;
KServe batches only in its Go agent sidecar on Kubernetes (the InferenceService `batcher:` field, V1beta1Batcher),
which is not part of the Python server. So each request is its own ONNX Runtime call, as in the naive peer. A sync
predict() runs on the server's event loop (kserve/model.py Model.__call__ calls it directly).

Runs in its own venv (kserve pins its fastapi/pydantic/uvicorn), with the checkout on sys.path:

    python3.11 -m venv .cache/peers/kserve && .cache/peers/kserve/bin/pip install kserve==0.21.0 \\
        onnxruntime==1.32.0 tokenizers==0.23.3 numpy==2.4.6 opencv-python-headless==5.1.0.95 pillow==13.0.0
    .cache/peers/kserve/bin/python scripts/bench/peers/kserve_text.py --http-port 8300 --model-dir DIR --intra-op 1

(the same venv serves scripts/bench/peers/kserve_detect.py; the harness's --kserve-python points at it).

HTTP (KServe V1): POST /v1/models/intent:predict {"instances": ["play jazz"]} -> {"predictions": [{"label", "score",
"top_k": [{"label", "score"}, ...]}]} (the naive peer's result shape); GET /v1/models/intent is 200 once loaded.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kserve import Model
from kserve.errors import InvalidInput

# run as a script from its own venv: the peers' shared helpers are imported from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scripts.bench.peers.common import kserve_parser, read_manifest, serve_kserve, session
from scripts.bench.peers.pipelines import TextClassifier

NAME = "intent"
TOP_K = 3  # what the harness asks the naive peer for


class IntentModel(Model):
    def __init__(self, model_dir: Path, intra_op: int):
        super().__init__(NAME)
        self.model_dir, self.intra_op = model_dir, intra_op
        self.classify: TextClassifier | None = None
        self.load()

    def load(self) -> bool:
        manifest = read_manifest(self.model_dir)
        self.classify = TextClassifier(self.model_dir, manifest, session(self.model_dir, manifest, self.intra_op),
                                       TOP_K)
        self.ready = True
        return self.ready

    def predict(self, payload: Any, headers: dict[str, str] | None = None) -> dict:
        texts = payload.get("instances") if isinstance(payload, dict) else None
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise InvalidInput('expected {"instances": ["<text>", ...]}: a non-empty list of non-empty strings')
        assert self.classify is not None
        return {"predictions": [r.as_dict() for r in self.classify(texts)]}


def main() -> None:
    args = kserve_parser().parse_args()
    serve_kserve(IntentModel(args.model_dir, args.intra_op), args.http_port)


if __name__ == "__main__":
    main()
