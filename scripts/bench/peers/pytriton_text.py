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
"data": ["play jazz"]}]}. From the project it imports only scripts/bench/peers/common.py (standard library and
onnxruntime: the command line, the session, the Triton server), with the checkout on sys.path.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import Tensor
from tokenizers import Tokenizer

# run as a script from its own venv: the peers' shared helpers are imported from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from scripts.bench.peers.common import serve_triton, triton_model, triton_parser


def main() -> None:
    ap = triton_parser(max_batch_size=64)
    ap.add_argument("--top-k", type=int, default=3)
    args = ap.parse_args()
    manifest, session = triton_model(args)
    pre = manifest["preprocess"]
    labels = np.array([s.encode() for s in manifest["labels"]], dtype=object)
    tok = Tokenizer.from_file(str(args.model_dir / pre["tokenizer_file"]))
    tok.no_padding()
    tok.enable_truncation(max_length=int(pre["max_length"]))
    pad = tok.token_to_id("[PAD]")
    pad_id = int(pad if pad is not None else 0)
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

    serve_triton(args, "intent", infer, inputs=[Tensor(name="text", dtype=bytes, shape=(1,))],
                 outputs=[Tensor(name="labels", dtype=bytes, shape=(k,)),
                          Tensor(name="scores", dtype=np.float32, shape=(k,))])


if __name__ == "__main__":
    main()
