"""batch/spark_engine.py: the same job on Spark local[2] (Java required) writes the local engine's rows."""
from __future__ import annotations

import shutil

import pytest

from triserve.batch.sinks import read_rows

pytest.importorskip("pyspark", reason="the batch-spark extra (pyspark) is not installed")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java (java not on PATH)", allow_module_level=True)


def test_spark_writes_the_local_rows_for_texts_images_and_series(run_job, tmp_path):
    for command in ("classify", "detect", "forecast"):
        run_job(command, tmp_path / command / "local", "--workers", "0")
        summary = run_job(command, tmp_path / command / "spark", "--engine", "spark", "--workers", "2")
        assert summary["complete"] and summary["engine"] == "spark"
        assert read_rows(tmp_path / command / "spark") == read_rows(tmp_path / command / "local"), command
