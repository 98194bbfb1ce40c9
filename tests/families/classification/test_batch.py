"""`triserve batch classify-image` on the session's tiny colour classifier: a row per image with its label, error
rows for a corrupt and an empty file instead of a stopped job."""
from __future__ import annotations

import pytest
from PIL import Image

pytest.importorskip("pyarrow", reason="the batch extra (pyarrow) is not installed")

COLOURS = {"red": (230, 10, 10), "green": (10, 200, 20), "blue": (20, 20, 220), "black": (5, 5, 5)}


def test_rows_carry_the_labels_and_bad_files_are_error_rows(tiny_registry, tmp_path):
    from triserve.batch import cli
    from triserve.batch.sinks import read_rows

    images = tmp_path / "images"
    images.mkdir()
    for i, (name, rgb) in enumerate(COLOURS.items()):
        Image.new("RGB", (40 + 10 * i, 70), rgb).save(images / f"{name}.png")
    (images / "empty.jpg").write_bytes(b"")
    (images / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png at all")
    args = cli._parser().parse_args(["classify-image", "--deployment", "classification", "--input", str(images),
                                     "--output", str(tmp_path / "out"), "--registry", str(tiny_registry.root),
                                     "--cache-dir", str(tmp_path / "cache"), "--quiet", "--chunk-size", "2",
                                     "--workers", "0", "--top-k", "2"])
    summary = cli.run(args)
    rows = {r["key"]: r for r in read_rows(tmp_path / "out")}
    assert summary["complete"] and summary["items"] == 6 and summary["errors"] == 2
    assert rows["empty.jpg"]["error_code"] == rows["corrupt.png"]["error_code"] == "invalid_image"
    for i, name in enumerate(COLOURS):
        row = rows[f"{name}.png"]
        assert row["label"] == name == row["top_k_labels"][0] and len(row["top_k_scores"]) == 2
        assert (row["width"], row["height"]) == (40 + 10 * i, 70) and row["deployment"] == "classification"
