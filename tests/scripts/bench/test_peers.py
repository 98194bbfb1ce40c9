"""scripts/bench/peers/common.py: what the naive and PyTriton peers share (the model from the environment, the
session options, the command line); no server starts."""
from __future__ import annotations

import json

import pytest

from scripts.bench.peers import common


def test_the_pytriton_command_line_is_what_the_harness_passes(tmp_path):
    ap = common.triton_parser(max_batch_size=16)
    args = ap.parse_args(["--model-dir", str(tmp_path), "--http-port", "1", "--grpc-port", "2", "--metrics-port", "3",
                          "--max-queue-delay-us", "50", "--intra-op", "1"])
    assert (args.model_dir, args.http_port, args.grpc_port, args.metrics_port) == (tmp_path, 1, 2, 3)
    assert (args.max_batch_size, args.max_queue_delay_us, args.intra_op) == (16, 50, 1)
    with pytest.raises(SystemExit):
        ap.parse_args([])  # --model-dir is required


def test_naive_model_comes_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "manifest.json").write_text(json.dumps({"model_file": "model.onnx"}))
    opened = {}
    monkeypatch.setattr(common, "session", lambda d, m, intra: opened.update(dir=d, manifest=m, intra=intra) or "s")
    monkeypatch.setenv("TRISERVE_BENCH_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("TRISERVE_BENCH_INTRA_OP", "1")
    assert common.naive_model("minilm-intent") == (tmp_path, {"model_file": "model.onnx"}, "s")
    assert opened == {"dir": tmp_path, "manifest": {"model_file": "model.onnx"}, "intra": 1}


def test_naive_app_answers_readyz():
    from fastapi.testclient import TestClient

    with TestClient(common.naive_app("x")) as client:
        assert client.get("/readyz").json() == {"ready": True}
