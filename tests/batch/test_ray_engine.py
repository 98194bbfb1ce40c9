"""batch/ray_engine.py: the same job on a local Ray cluster (127.0.0.1) writes the local engine's rows."""
from __future__ import annotations

import pytest

from triserve.batch.sinks import read_rows

pytest.importorskip("ray", reason="the batch-ray extra (ray[data]) is not installed")


@pytest.fixture(scope="module", autouse=True)
def _one_local_ray():
    """One local Ray for the module (run_ray uses a running one, as with RAY_ADDRESS): five jobs, one start (each
    start and shutdown of a local Ray took ~8 s of the suite)."""
    import ray

    from triserve.batch.ray_engine import start_local

    start_local(3)  # the most any job here asks for: two actors + one CPU for Ray Data's own tasks
    yield
    ray.shutdown()


def test_ray_writes_the_local_rows_for_texts_images_and_series(run_job, tmp_path):
    for command in ("classify", "detect", "forecast"):
        run_job(command, tmp_path / command / "local", "--workers", "0")
        summary = run_job(command, tmp_path / command / "ray", "--engine", "ray", "--workers", "2")
        assert summary["complete"] and summary["engine"] == "ray"
        assert read_rows(tmp_path / command / "ray") == read_rows(tmp_path / command / "local"), command


def test_ray_resumes_a_partial_job(run_job, tmp_path):
    run_job("classify", tmp_path / "local", "--workers", "0")
    run_job("classify", tmp_path / "ray", "--engine", "ray", "--workers", "1")
    for part in sorted((tmp_path / "ray").glob("part-*"))[1::2]:  # every other shard lost
        part.unlink()
    summary = run_job("classify", tmp_path / "ray", "--engine", "ray", "--workers", "1")
    assert summary["shards_run"] == summary["shards"] // 2
    assert read_rows(tmp_path / "ray") == read_rows(tmp_path / "local")
