"""The local engine on the tiny models: exact expectations per family, error rows instead of stopped jobs, worker
processes giving the rows one process gives, and a crashed job resumed to exactly the uninterrupted output."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.batch.conftest import LINE_SERIES, TEXTS
from triserve.batch import work
from triserve.batch.sinks import read_rows


def rows_by_key(output: Path) -> dict[str, dict]:
    rows = read_rows(output)
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "an item was written twice"
    return {r["key"]: r for r in rows}


def test_classify_rows_match_the_model_run_directly(run_job, tiny_registry, tmp_path):
    import onnxruntime as ort

    from triserve.families.text import runtime
    from triserve.families.text.preprocess import TextTokenizer

    summary = run_job("classify", tmp_path / "out", "--workers", "0", "--top-k", "2")
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["items"] == len(rows) == len(TEXTS) * 5
    assert rows["t002"]["error_code"] == "empty_text" and rows["t004"]["error_code"] == "empty_text"
    assert rows["t002"]["label"] is None
    assert summary["errors"] == 10
    assert rows["t006"]["truncated"] is True and rows["t006"]["chars"] == 3000  # cut, classified, said so
    # one word, by hand: tokenizer + session + argmax
    directory, manifest = tiny_registry.load_verified("minilm-intent", "stable")
    pre = manifest.preprocess
    tok = TextTokenizer(directory / pre.tokenizer_file, pre.max_length, pre.pad_token_id)
    ids = tok.encode(["hello"])
    session = ort.InferenceSession(str(directory / manifest.model_file), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    probs = session.run(None, runtime.feeds(manifest, names, ids))[0][0]
    row = rows["t003"]
    assert row["tokens"] == len(ids[0])
    assert row["label"] == manifest.labels[int(np.argmax(probs))]
    assert row["score"] == pytest.approx(float(probs.max()), abs=1e-5)
    assert row["top_labels"][0] == row["label"] and len(row["top_labels"]) == 2
    assert row["version"] == tiny_registry.resolve("minilm-intent", "stable") and row["deployment"] == "text"


def test_detect_error_rows_do_not_stop_the_job(run_job, batch_inputs, tmp_path):
    from PIL import Image

    summary = run_job("detect", tmp_path / "out", "--workers", "0")
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["items"] == 16 and summary["errors"] == 2
    assert rows["empty.jpg"]["error_code"] == "invalid_image"
    assert rows["corrupt.png"]["error_code"] == "invalid_image" and rows["corrupt.png"]["boxes"] is None
    for key, row in rows.items():
        if row["error_code"] is None:
            with Image.open(batch_inputs["detect"] / key) as img:
                assert (row["width"], row["height"]) == img.size
            assert len(row["boxes"]) == len(row["scores"]) == len(row["labels"])


def test_forecast_continues_a_straight_line(run_job, tmp_path):
    summary = run_job("forecast", tmp_path / "out", "--workers", "0", "--horizon", "5")
    rows = rows_by_key(tmp_path / "out")
    assert summary["complete"] and summary["errors"] == 1
    assert rows["lonely"]["error_code"] == "frequency_required"
    line = rows[LINE_SERIES]
    assert line["frequency"] == "D" and len(line["point"]) == 5
    assert line["point"] == pytest.approx([10 + 2 * t for t in range(40, 45)], rel=1e-9)
    assert [t.day for t in line["timestamps"]] == [10, 11, 12, 13, 14]  # 2024-01-01 + 40 days = 2024-02-10
    assert all(lo <= p <= hi for lo, p, hi in zip(line["lower_90"], line["point"], line["upper_90"]))


@pytest.mark.parametrize("command", ["classify", "detect", "forecast"])
def test_worker_processes_write_what_one_process_writes(run_job, tmp_path, command):
    run_job(command, tmp_path / "inline", "--workers", "0")
    summary = run_job(command, tmp_path / "workers", "--workers", "2", "--format", "jsonl")
    assert summary["complete"]
    run_job(command, tmp_path / "inline_jsonl", "--workers", "0", "--format", "jsonl")
    assert read_rows(tmp_path / "workers") == read_rows(tmp_path / "inline_jsonl")
    assert [r["key"] for r in read_rows(tmp_path / "workers")] == [r["key"] for r in read_rows(tmp_path / "inline")]


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("workers", ["0", "1"])
def test_crash_between_shards_then_resume_is_exact(run_job, tmp_path, monkeypatch, workers):
    reference = run_job("classify", tmp_path / "reference", "--workers", "0")
    real = work.commit_shard
    committed = []

    def crashing(*args, **kwargs):
        if len(committed) == 2:
            raise Crash("killed after two shards")
        committed.append(real(*args, **kwargs))
        return committed[-1]

    import triserve.batch.engine

    monkeypatch.setattr(work, "commit_shard", crashing)
    monkeypatch.setattr(triserve.batch.engine, "commit_shard", crashing)
    with pytest.raises(Crash):
        run_job("classify", tmp_path / "out", "--workers", workers)
    monkeypatch.undo()
    kept = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("part-*")}
    assert len(kept) == 2
    resumed = run_job("classify", tmp_path / "out", "--workers", workers)
    assert resumed["shards_skipped"] == 2 and resumed["shards_run"] == reference["shards"] - 2
    assert resumed["items"] == reference["items"] and resumed["errors"] == reference["errors"]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("part-*") if p.name in kept} == kept
    assert read_rows(tmp_path / "out") == read_rows(tmp_path / "reference")
    again = run_job("classify", tmp_path / "out", "--workers", workers)
    assert again["shards_run"] == 0 and again["complete"]


def test_images_under_an_object_store_prefix_give_the_folder_rows(run_job, batch_inputs, s3_endpoint, tmp_path):
    """`--input s3://bucket/prefix` (a moto S3 server on 127.0.0.1): every image under the prefix, read by the worker
    that decodes it, gives exactly the row the same file gives from a local folder (non-images skipped)."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    folder = batch_inputs["detect"]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.put_object(Bucket="models", Key=f"photos/{path.relative_to(folder).as_posix()}", Body=path.read_bytes())
    local = run_job("detect", tmp_path / "local", "--workers", "0")
    remote = run_job("detect", tmp_path / "s3", "--workers", "0", source=f"s3://models/photos?endpoint_url={s3_endpoint}")
    assert remote["items"] == local["items"] == 16 and remote["errors"] == local["errors"] == 2
    assert rows_by_key(tmp_path / "s3") == rows_by_key(tmp_path / "local")
