"""The files `mlserver start <folder>` reads, written by the harness for one MLServer peer: <folder>/settings.json
(the server: loopback host, free ports, the default single inference worker, debug logging off) and
<folder>/<model>/model-settings.json (the custom runtime by import path, adaptive batching ON with max_batch_size and
max_batch_time, the model directory as parameters.uri, the ONNX Runtime intra-op threads in parameters.extra).
Standard library only: the project venv writes them, the MLServer venv reads them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MLServerPeer:
    """One MLServer peer: which runtime serves which model directory under which name, and how it batches."""

    model_name: str
    implementation: str  # import path of the mlserver.MLModel subclass, e.g. scripts.bench.peers.mlserver_text.X
    model_dir: Path
    max_batch_size: int
    max_batch_time_s: float
    intra_op: int

    def __post_init__(self) -> None:
        # MLServer skips adaptive batching unless both are set (mlserver/batching/hooks.py load_batching)
        if self.max_batch_size <= 1 or self.max_batch_time_s <= 0:
            raise ValueError(f"adaptive batching needs max_batch_size > 1 and max_batch_time > 0, got "
                             f"{self.max_batch_size} and {self.max_batch_time_s}")


def server_settings(folder: Path, http_port: int, grpc_port: int, metrics_port: int) -> dict:
    """settings.json: loopback only; MLServer's default of one inference worker process (parallel_workers 1); its
    metrics and environment folders inside `folder` (their default is the working directory, the checkout)."""
    return {"debug": False, "host": "127.0.0.1", "http_port": http_port, "grpc_port": grpc_port,
            "metrics_port": metrics_port, "parallel_workers": 1, "load_models_at_startup": True,
            "metrics_dir": str(folder / ".metrics"), "environments_dir": str(folder / ".envs")}


def model_settings(peer: MLServerPeer) -> dict:
    """model-settings.json of the peer's model."""
    return {"name": peer.model_name, "implementation": peer.implementation,
            "max_batch_size": peer.max_batch_size, "max_batch_time": peer.max_batch_time_s,
            "parameters": {"uri": str(Path(peer.model_dir).resolve()), "extra": {"intra_op": peer.intra_op}}}


def write_settings(folder: Path, peer: MLServerPeer, http_port: int, grpc_port: int, metrics_port: int) -> Path:
    """Both files under `folder` (created); returns `folder`, the argument of `mlserver start`."""
    folder = Path(folder)
    (folder / peer.model_name).mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(server_settings(folder, http_port, grpc_port, metrics_port),
                                                     indent=2))
    (folder / peer.model_name / "model-settings.json").write_text(json.dumps(model_settings(peer), indent=2))
    return folder
