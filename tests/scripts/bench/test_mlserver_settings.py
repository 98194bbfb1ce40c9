"""scripts/bench/peers/mlserver_settings.py: the files `mlserver start` reads, as the harness writes them (no MLServer
needed: they are checked as MLServer 1.7 reads them, by key)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.bench.peers.mlserver_settings import MLServerPeer, write_settings


def _peer(tmp_path: Path, **kw) -> MLServerPeer:
    base = {"model_name": "intent", "implementation": "scripts.bench.peers.mlserver_text.IntentRuntime",
            "model_dir": tmp_path / "model", "max_batch_size": 64, "max_batch_time_s": 0.002, "intra_op": 1}
    return MLServerPeer(**{**base, **kw})


def test_settings_bind_loopback_with_the_given_ports_and_keep_state_out_of_the_checkout(tmp_path):
    folder = write_settings(tmp_path / "srv", _peer(tmp_path), 9001, 9002, 9003)
    server = json.loads((folder / "settings.json").read_text())
    assert server["host"] == "127.0.0.1" and server["debug"] is False
    assert (server["http_port"], server["grpc_port"], server["metrics_port"]) == (9001, 9002, 9003)
    assert server["parallel_workers"] == 1  # MLServer's default: one inference worker process
    assert Path(server["metrics_dir"]).parent == folder and Path(server["environments_dir"]).parent == folder


def test_model_settings_turn_adaptive_batching_on_around_the_runtime(tmp_path):
    folder = write_settings(tmp_path / "srv", _peer(tmp_path), 1, 2, 3)
    model = json.loads((folder / "intent" / "model-settings.json").read_text())
    assert model["name"] == "intent"
    assert model["implementation"] == "scripts.bench.peers.mlserver_text.IntentRuntime"
    assert (model["max_batch_size"], model["max_batch_time"]) == (64, 0.002)
    assert model["parameters"] == {"uri": str((tmp_path / "model").resolve()), "extra": {"intra_op": 1}}


@pytest.mark.parametrize("size,seconds", [(1, 0.002), (64, 0.0)])
def test_settings_that_would_silently_turn_batching_off_are_refused(tmp_path, size, seconds):
    with pytest.raises(ValueError, match="adaptive batching"):
        _peer(tmp_path, max_batch_size=size, max_batch_time_s=seconds)
