"""Peer for scripts/bench/compare.py: the naive way to serve the intent model - FastAPI, one ONNX Runtime call per
request, no batching, no runner hop. Same model file, same tokenizer, same session options and the same request and
response shape as triserve's /v1/classify (top-k labels with scores).

    uvicorn scripts.bench.peers.naive_fastapi:app --host 127.0.0.1 --port 8100

Model: TRISERVE_BENCH_MODEL_DIR (an artifact directory with manifest.json, model.onnx, tokenizer.json), default
models/store/minilm-intent at alias stable (scripts/bench/peers/common.py naive_model).
"""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from scripts.bench.peers.common import naive_app, naive_model
from triserve.families.text.preprocess import TextTokenizer

MODEL_DIR, MANIFEST, SESSION = naive_model("minilm-intent")
PRE = MANIFEST["preprocess"]
LABELS = MANIFEST["labels"]
TOKENIZER = TextTokenizer(MODEL_DIR / PRE["tokenizer_file"], PRE["max_length"])

app = naive_app("naive intent classifier")


class ClassifyRequest(BaseModel):
    texts: list[str] = Field(min_length=1, max_length=64)
    top_k: int = Field(3, ge=1, le=20)


@app.post("/v1/classify")
def classify(body: ClassifyRequest) -> dict:  # a plain def: FastAPI runs it on its thread pool, as most apps do
    ids, mask = TOKENIZER.encode_padded(body.texts)
    probs = SESSION.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    results = []
    for row in probs:
        top = np.argsort(-row, kind="stable")[: body.top_k]
        results.append({"label": LABELS[top[0]], "score": round(float(row[top[0]]), 6),
                        "top_k": [{"label": LABELS[j], "score": round(float(row[j]), 6)} for j in top]})
    return {"results": results}
