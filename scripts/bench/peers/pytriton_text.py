"""Peer for scripts/bench/compare.py: the intent model behind NVIDIA PyTriton (Triton Inference Server + its
DynamicBatcher), tokenisation inside the batched infer function, top-k labels out. Same model file, tokenizer
settings (no padding, truncation at the manifest's max_length, pad per batch to the longest) and session options.

Runs in its own venv (nvidia-pytriton pins numpy<2; the project venv keeps numpy 2):

    python -m venv .cache/bench/pytriton-venv && .cache/bench/pytriton-venv/bin/pip install nvidia-pytriton \
        onnxruntime==1.32.0 tokenizers==0.23.3
    LD_LIBRARY_PATH=$(.cache/bench/pytriton-venv/bin/python \
                      -c "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))") \
        .cache/bench/pytriton-venv/bin/python scripts/bench/peers/pytriton_text.py --http-port 8200 --model-dir DIR

HTTP (KServe v2): POST /v2/models/intent/infer {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES",
"data": ["play jazz"]}]}. Standalone on purpose: imports nothing from the project.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig
from tokenizers import Tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--http-port", type=int, default=8200)
    ap.add_argument("--grpc-port", type=int, default=8201)
    ap.add_argument("--metrics-port", type=int, default=8202)
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--max-queue-delay-us", type=int, default=0, help="DynamicBatcher delay (Triton default 0)")
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--intra-op", type=int, default=0, help="ONNX Runtime intra-op threads (0 = ORT default)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    manifest = json.loads((args.model_dir / "manifest.json").read_text())
    pre = manifest["preprocess"]
    labels = np.array([s.encode() for s in manifest["labels"]], dtype=object)
    tok = Tokenizer.from_file(str(args.model_dir / pre["tokenizer_file"]))
    tok.no_padding()
    tok.enable_truncation(max_length=int(pre["max_length"]))
    pad = tok.token_to_id("[PAD]")
    pad_id = int(pad if pad is not None else 0)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = args.intra_op
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(args.model_dir / manifest["model_file"]), opts,
                                   providers=["CPUExecutionProvider"])
    k = args.top_k

    @batch
    def infer(text: np.ndarray) -> dict[str, np.ndarray]:
        texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in text.reshape(-1)]
        enc = tok.encode_batch(texts)
        width = max(len(e.ids) for e in enc)
        ids = np.full((len(enc), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(enc), width), dtype=np.int64)
        for i, e in enumerate(enc):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        probs = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
        return {"labels": labels[top], "scores": np.take_along_axis(probs, top, axis=1).astype(np.float32)}

    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1",
                          grpc_port=args.grpc_port, metrics_port=args.metrics_port)
    with Triton(config=config) as triton:
        triton.bind(model_name="intent", infer_func=infer,
                    inputs=[Tensor(name="text", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="labels", dtype=bytes, shape=(k,)),
                             Tensor(name="scores", dtype=np.float32, shape=(k,))],
                    config=ModelConfig(max_batch_size=args.max_batch_size,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)),
                    strict=False)
        triton.serve()


if __name__ == "__main__":
    main()
