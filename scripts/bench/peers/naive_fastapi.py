"""Peer for scripts/bench/compare.py: the naive way to serve the intent model - FastAPI, one ONNX Runtime call per
request, no batching, no runner hop. Same model file, same tokenizer, same session options and the same request and
response shape as triserve's /v1/classify (top-k labels with scores).

    uvicorn scripts.bench.peers.naive_fastapi:app --host 127.0.0.1 --port 8100

Model: TRISERVE_BENCH_MODEL_DIR (an artifact directory with manifest.json, model.onnx, tokenizer.json), default
models/store/minilm-intent at alias stable.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from pydantic import BaseModel, Field

from families.text.preprocess import TextTokenizer
from scripts.bench.textmix import model_dir

_dir = os.environ.get("TRISERVE_BENCH_MODEL_DIR")
MODEL_DIR, MANIFEST = (Path(_dir), None) if _dir else model_dir()
if MANIFEST is None:
    import json

    MANIFEST = json.loads((MODEL_DIR / "manifest.json").read_text())
PRE = MANIFEST["preprocess"]
LABELS = MANIFEST["labels"]

opts = ort.SessionOptions()  # as runners/pool.py with configs/serving.yaml: all graph optimisations, intra 0, inter 1
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
opts.intra_op_num_threads = int(os.environ.get("TRISERVE_BENCH_INTRA_OP", "0"))
opts.inter_op_num_threads = 1
SESSION = ort.InferenceSession(str(MODEL_DIR / MANIFEST["model_file"]), opts, providers=["CPUExecutionProvider"])
TOKENIZER = TextTokenizer(MODEL_DIR / PRE["tokenizer_file"], PRE["max_length"])

app = FastAPI(title="naive intent classifier")


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


@app.get("/readyz")
def readyz() -> dict:
    return {"ready": True}
