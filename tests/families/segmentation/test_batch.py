"""`triserve batch segment` on the session's tiny segmentation model: each image's row holds the instances /v1/segment
answers for it (boxes, scores, labels, areas, COCO RLE counts, the same thresholds), and a corrupt file is an error
row with the service's code instead of a stopped job."""
from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw

pytest.importorskip("pyarrow", reason="the batch extra (pyarrow) is not installed")

ASK = {"conf_threshold": 0.001, "max_detections": 5}  # the tiny model scores low: ask for its best few


def _image(i: int) -> bytes:
    img = Image.new("RGB", (80 + 16 * i, 64), (30, 30, 30))
    ImageDraw.Draw(img).ellipse([8, 8, 40 + 8 * i, 50], fill=(220, 40, 40))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_rows_hold_what_the_service_answers(server, tiny_registry, tmp_path):
    from triserve.batch import cli
    from triserve.batch.sinks import read_rows

    images = tmp_path / "images"
    images.mkdir()
    photos = {f"shape{i}.png": _image(i) for i in range(3)}
    for name, data in photos.items():
        (images / name).write_bytes(data)
    (images / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    args = cli._parser().parse_args(["segment", "--deployment", "segmentation", "--input", str(images),
                                     "--output", str(tmp_path / "out"), "--registry", str(tiny_registry.root),
                                     "--cache-dir", str(tmp_path / "cache"), "--quiet", "--chunk-size", "2",
                                     "--workers", "0", "--conf-threshold", "0.001", "--max-detections", "5"])
    summary = cli.run(args)
    rows = {r["key"]: r for r in read_rows(tmp_path / "out")}
    assert summary["complete"] and summary["items"] == 4 and summary["errors"] == 1
    assert rows["corrupt.png"]["error_code"] == "invalid_image"
    found = 0
    for name, data in photos.items():
        body = {"images": [{"data": base64.b64encode(data).decode()}], "mask_format": "rle", **ASK}
        resp = httpx.post(f"{server.url}/v1/segment", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        [served] = resp.json()["results"]
        row = rows[name]
        assert (row["width"], row["height"]) == (served["width"], served["height"])
        assert row["candidates"] == served["candidates"] and row["masks_skipped"] == served["masks_skipped"]
        inst = served["instances"]
        assert np.allclose(np.reshape(row["boxes"], (-1, 4)), np.reshape([i["box"] for i in inst], (-1, 4)), atol=0.02)
        assert row["scores"] == pytest.approx([i["score"] for i in inst], abs=1e-4)
        assert row["labels"] == [i["label"] for i in inst] and row["areas"] == [i["area"] for i in inst]
        assert row["rle"] == [i["rle"]["counts"] if i.get("rle") else None for i in inst]
        found += len(inst)
    assert found > 0  # the comparison covered instances, not only empty answers
