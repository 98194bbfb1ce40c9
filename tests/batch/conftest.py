"""Inputs for the batch tests (images with a corrupt and an empty one, texts, a long series table) and a helper that
runs a job through the CLI's own code on the session's tiny models (tests/conftest.py: tiny_registry, and
TRISERVE_MODELS_FILE = tests/fixtures/models.tiny.yaml: deployments 'detection', 'text', 'forecast')."""
from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the batch extra (pyarrow) is not installed")

TEXTS = ["what is my account balance", "book a flight to paris next monday", "", "hello", "\u200b\u200b",
         "set a timer for ten minutes", "x" * 3000, "play jazz"]
LINE_SERIES = "line"  # 10 + 2t: its forecast is the line continued


def make_images(root: Path, n: int = 14) -> Path:
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    (root / "sub").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        img = Image.new("RGB", (int(rng.integers(48, 160)), int(rng.integers(48, 160))), (20, 20, 20))
        x, y = int(rng.integers(0, 20)), int(rng.integers(0, 20))
        ImageDraw.Draw(img).rectangle([x, y, x + 24, y + 16], fill=(200, 30, 30))
        img.save(root / ("sub" if i % 3 == 0 else ".") / f"img{i:03d}.{'png' if i % 2 else 'jpg'}")
    (root / "empty.jpg").write_bytes(b"")
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png at all")
    (root / "notes.txt").write_text("not an image: ignored")
    return root


def make_texts(path: Path, repeat: int = 5) -> Path:
    with open(path, "w") as fh:
        for i, text in enumerate(TEXTS * repeat):
            fh.write(json.dumps({"id": f"t{i:03d}", "text": text}) + "\n")
    return path


def make_series(path: Path, n_series: int = 12) -> Path:
    """A long table, rows shuffled: LINE_SERIES, seasonal noisy series, one with a single point (refused)."""
    rng = np.random.default_rng(1)
    rows = []
    for s in range(n_series):
        key = LINE_SERIES if s == 0 else f"s{s:02d}"
        for t in range(40 + s):
            value = 10 + 2 * t if s == 0 else 100 + 10 * np.sin(2 * np.pi * t / 7) + s + rng.normal()
            rows.append((key, (dt.datetime(2024, 1, 1) + dt.timedelta(days=t)).isoformat(), float(value)))
    rows.append(("lonely", "2024-01-01T00:00:00", 1.0))
    order = rng.permutation(len(rows))
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "timestamp", "value"])
        for i in order:
            w.writerow(rows[i])
    return path


@pytest.fixture(scope="session")
def batch_inputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("batch-inputs")
    return {"detect": make_images(root / "images"), "classify": make_texts(root / "texts.jsonl"),
            "forecast": make_series(root / "series.csv")}


DEPLOYMENT = {"detect": "detection", "classify": "text", "forecast": "forecast", "forecast-panel": "forecast",
              "forecast-backtest": "forecast"}
SMALL = ["--shard-size", "8", "--chunk-size", "4"]


@pytest.fixture
def run_job(tiny_registry, batch_inputs, tmp_path_factory):
    """run_job(command, output, *extra, source=None) -> the summary, through triserve.batch.cli's parser and run(); the
    input
    is batch_inputs[command] unless `source` is given."""
    from triserve.batch import cli

    cache = tmp_path_factory.mktemp("batch-cache")

    def run(command: str, output: Path, *extra: str, source: Path | str | None = None) -> dict:
        source = source or batch_inputs[command]
        args = cli._parser().parse_args([command, "--deployment", DEPLOYMENT[command], "--input", str(source),
                                         "--output", str(output), "--registry", str(tiny_registry.root),
                                         "--cache-dir", str(cache), "--quiet", *SMALL, *extra])
        return cli.run(args)

    return run


@pytest.fixture(autouse=True)
def _pil_as_shipped(monkeypatch):
    """ultralytics (imported by the session's tiny-model build) patches PIL.Image.open to retry unidentified images
    through pi_heif, which is not installed: that process would then report a corrupt image differently from a fresh
    worker process. The jobs here run as `triserve batch` runs them: PIL as shipped."""
    from PIL import Image

    original = getattr(sys.modules.get("ultralytics.utils.patches"), "_image_open", None)
    if original is not None:
        monkeypatch.setattr(Image, "open", original)


from tests.models.conftest import s3_endpoint  # noqa: E402,F401 - the moto S3 server fixture, shared
