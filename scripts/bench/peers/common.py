"""What the benchmark peers share: the model's directory and manifest, the ONNX Runtime session every system of a
comparison runs (the runner's settings from runners/pool.py with configs/serving.yaml: all graph optimisations,
inter-op 1, intra-op as the comparison says; the in-process ceilings of compare.py and compare_detect.py use it too),
the naive FastAPI app's model and readiness route, the PyTriton command line and server, and the KServe command
line and server.

The PyTriton and KServe peers run in venvs of their own (nvidia-pytriton pins numpy<2; kserve and mlserver pin
fastapi, pydantic and friends), with the checkout on sys.path: at the top this imports the standard library and
onnxruntime only; pytriton, kserve, fastapi and the project's modules are imported where they are used.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort


def read_manifest(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "manifest.json").read_text())


def session(model_dir: Path, manifest: dict, intra_op: int) -> ort.InferenceSession:
    """The CPU session of the model file, as the runner opens it (intra-op threads: 0 = ONNX Runtime's default)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = intra_op
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(Path(model_dir) / manifest["model_file"]), opts, providers=["CPUExecutionProvider"])


# --------------------------------------------------------------------------------------------------------------------
# the naive FastAPI peers (project venv, under uvicorn)
# --------------------------------------------------------------------------------------------------------------------
def naive_model(default_name: str) -> tuple[Path, dict, ort.InferenceSession]:
    """The model a naive peer serves: TRISERVE_BENCH_MODEL_DIR (an artifact directory), else models/store/<name> at
    alias stable; ONNX Runtime intra-op threads TRISERVE_BENCH_INTRA_OP (default 0)."""
    from_env = os.environ.get("TRISERVE_BENCH_MODEL_DIR")
    if from_env:
        model_dir, manifest = Path(from_env), read_manifest(Path(from_env))
    else:
        from scripts.bench.textmix import model_dir as stored

        model_dir, manifest = stored(name=default_name)
    return model_dir, manifest, session(model_dir, manifest, int(os.environ.get("TRISERVE_BENCH_INTRA_OP", "0")))


def naive_app(title: str):
    """A FastAPI app with GET /readyz (the harness waits for its 200)."""
    from fastapi import FastAPI

    app = FastAPI(title=title)

    @app.get("/readyz")
    def readyz() -> dict:
        return {"ready": True}

    return app


# --------------------------------------------------------------------------------------------------------------------
# the PyTriton peers (own venv)
# --------------------------------------------------------------------------------------------------------------------
def triton_parser(max_batch_size: int, max_batch_help: str | None = None) -> argparse.ArgumentParser:
    """The command line every PyTriton peer takes (scripts/bench/harness.py start_system passes it)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--http-port", type=int, default=8200)
    ap.add_argument("--grpc-port", type=int, default=8201)
    ap.add_argument("--metrics-port", type=int, default=8202)
    ap.add_argument("--max-batch-size", type=int, default=max_batch_size, help=max_batch_help)
    ap.add_argument("--max-queue-delay-us", type=int, default=0, help="DynamicBatcher delay (Triton default 0)")
    ap.add_argument("--intra-op", type=int, default=0, help="ONNX Runtime intra-op threads (0 = ORT default)")
    return ap


def triton_model(args: argparse.Namespace) -> tuple[dict, ort.InferenceSession]:
    """The peer's manifest and session (warnings only in the log)."""
    logging.basicConfig(level=logging.WARNING)
    manifest = read_manifest(args.model_dir)
    return manifest, session(args.model_dir, manifest, args.intra_op)


def serve_triton(args: argparse.Namespace, model_name: str, infer: Callable[..., Any], inputs: list,
                 outputs: list) -> None:
    """Triton on loopback with the batched infer function behind its DynamicBatcher, until stopped."""
    from pytriton.model_config import DynamicBatcher, ModelConfig
    from pytriton.triton import Triton, TritonConfig

    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1",
                          grpc_port=args.grpc_port, metrics_port=args.metrics_port)
    with Triton(config=config) as triton:
        triton.bind(model_name=model_name, infer_func=infer, inputs=inputs, outputs=outputs,
                    config=ModelConfig(max_batch_size=args.max_batch_size,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)),
                    strict=False)
        triton.serve()


# --------------------------------------------------------------------------------------------------------------------
# the KServe peers (own venv)
# --------------------------------------------------------------------------------------------------------------------
def kserve_parser() -> argparse.ArgumentParser:
    """The command line every KServe peer takes (scripts/bench/harness.py start_system passes it)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--http-port", type=int, default=8300)
    ap.add_argument("--intra-op", type=int, default=0, help="ONNX Runtime intra-op threads (0 = ORT default)")
    return ap


def serve_kserve(model: Any, http_port: int) -> None:
    """KServe's Python model server (`kserve.ModelServer().start([model])`) on loopback, until stopped: one uvicorn
    worker, gRPC off (triserve's is off in a comparison too), per-request latency logging off (the naive peer logs
    no access lines either). KServe 0.21 hard-codes host 0.0.0.0 in protocol/rest/server.py RESTServer; the
    benchmark binds loopback only, so the server's uvicorn config is pointed at 127.0.0.1 before it serves."""
    from kserve import ModelServer
    from kserve.protocol.rest import server as rest

    logging.basicConfig(level=logging.WARNING)
    init = rest.RESTServer.__init__

    def loopback_init(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.config.host = "127.0.0.1"

    rest.RESTServer.__init__ = loopback_init
    ModelServer(http_port=http_port, workers=1, enable_grpc=False, enable_latency_logging=False).start([model])
