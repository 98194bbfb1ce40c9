"""scripts/bench/compare_detect.py: the pure parts (request mix, agreement, goals); no servers."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from scripts.bench import compare_detect as cd


def test_image_sizes_have_exact_shares_and_are_seeded():
    sizes = cd.image_sizes(100, seed=3)
    assert sizes.count((320, 240)) == 30 and sizes.count((640, 480)) == 40 and sizes.count((1280, 720)) == 30
    assert sizes == cd.image_sizes(100, seed=3)
    assert sizes != cd.image_sizes(100, seed=4)
    small = cd.image_sizes(7)
    assert len(small) == 7 and {s for s in small} == {(320, 240), (640, 480), (1280, 720)}


def test_image_mix_is_deterministic_jpeg_of_the_declared_size():
    a, b = cd.image_mix(4, seed=1), cd.image_mix(4, seed=1)
    assert [x["b64"] for x in a] == [x["b64"] for x in b]
    assert a[0]["b64"] != cd.image_mix(4, seed=2)[0]["b64"]
    for im in a:
        raw = base64.b64decode(im["b64"])
        with Image.open(io.BytesIO(raw)) as img:
            assert img.format == "JPEG" and img.size == (im["width"], im["height"])
        assert 1 <= len(im["objects"]) <= 6
        for _, (x1, y1, x2, y2) in im["objects"]:
            assert 0 <= x1 < x2 <= im["width"] and 0 <= y1 < y2 <= im["height"]


def test_request_bodies_and_parsers():
    url, body = cd.request_for("triserve", "http://127.0.0.1:1", "QUJD")  # its primary model or a refusal
    assert url.endswith("/v1/detect") and json.loads(body) == {"images": [{"data": "QUJD"}], "model": "primary"}
    url, body = cd.request_for("naive", "http://127.0.0.1:1", "QUJD")
    assert url.endswith("/v1/detect") and json.loads(body) == {"images": [{"data": "QUJD"}]}
    url, body = cd.request_for("pytriton", "http://127.0.0.1:1", "QUJD")
    assert url.endswith("/v2/models/detector/infer") and json.loads(body)["inputs"][0]["data"] == ["QUJD"]
    triserve = {"results": [{"detections": [{"box": [1, 2, 3, 4], "score": 0.9, "class_id": 2, "label": "x"}]}]}
    assert cd.parse_detections("triserve", triserve) == [(2, [1.0, 2.0, 3.0, 4.0], 0.9)]
    triton = {"outputs": [{"name": "count", "data": [1]}, {"name": "boxes", "data": [1, 2, 3, 4, 0, 0, 0, 0]},
                          {"name": "scores", "data": [0.9, 0]}, {"name": "classes", "data": [2, -1]}]}
    assert cd.parse_detections("pytriton", triton) == [(2, [1.0, 2.0, 3.0, 4.0], 0.9)]


REF = [(0, [10.0, 10.0, 50.0, 50.0], 0.9), (1, [60.0, 60.0, 90.0, 95.0], 0.8)]


def test_match_detections():
    shuffled = [(1, [60.4, 60.0, 90.0, 95.9], 0.7), (0, [10.0, 9.5, 50.0, 50.0], 0.91)]
    m = cd.match_detections(REF, shuffled, tol_px=1.0)
    assert m["agree"] and m["max_box_diff_px"] == pytest.approx(0.9)
    assert not cd.match_detections(REF, [(1, b, s) for _, b, s in REF])["agree"]  # a class differs
    assert not cd.match_detections(REF, REF[:1])["agree"]  # a box missing
    far = cd.match_detections(REF, [REF[0], (1, [60.0, 60.0, 92.5, 95.0], 0.8)])
    assert not far["agree"] and far["max_box_diff_px"] == pytest.approx(2.5)
    assert cd.match_detections([], [])["agree"]


def test_agreement_summary_counts_errors_as_disagreement():
    s = cd.agreement_summary([REF, []], {"a": [REF, []], "b": [REF, "HTTP 500: boom"]})
    assert s["systems"]["a"]["images_agree"] == 2 and s["systems"]["b"]["images_agree"] == 1
    assert "HTTP 500" in s["systems"]["b"]["mismatches"][0] and not s["all_agree"] and s["boxes"] == 2


def _round(tri32, off32, naive32, pyt32, tri_p99, naive_p99, tri_c1_p50, ceiling, b1):
    def cell(tp, p50=None, p99=None):
        return {"images_per_s": tp, "latency_ms": {"p50": p50, "p90": None, "p99": p99}, "non_200": 0}

    return {"inproc": {"ceiling_images_per_s": ceiling, "single_call_ms_p50": b1},
            "triserve": {"1": cell(50, p50=tri_c1_p50), "32": cell(tri32, p99=tri_p99)},
            "triserve_nobatch": {"32": cell(off32)}, "naive": {"32": cell(naive32, p99=naive_p99)},
            "pytriton": {"32": cell(pyt32)},
            "triserve_local": {"1": cell(60, p50=b1 + 1.0), "32": cell(tri32 * 1.1)}}


def test_goal_ratios_and_evaluation():
    r = cd.ratios_for_round(_round(100, 40, 50, 80, 300, 400, 14.0, 120, 12.0))
    # the best peer is PyTriton (80 images/s against naive's 50): the goals compare with it
    assert r == pytest.approx({"batching_on_vs_off": 2.5, "triserve_vs_best_peer": 1.25, "triserve_p99_vs_naive": 0.75,
                               "triserve_vs_ceiling": 100 / 120, "c1_p50_overhead_ms": 2.0,
                               "local_vs_best_peer": 1.375, "local_vs_ceiling": 110 / 120,
                               "local_c1_p50_overhead_ms": 1.0})
    rounds = [r, cd.ratios_for_round(_round(85, 45, 50, 80, 500, 400, 20.0, 120, 12.0)),
              cd.ratios_for_round(_round(86, 40, 50, 80, 350, 400, 16.0, 120, 12.0))]
    goals = cd.evaluate_goals(rounds)
    best = goals["triserve_vs_best_peer"]
    assert best["median"] == pytest.approx(86 / 80, abs=1e-3) and best["met"] is False  # 1.075 < 1.1
    assert best["min"] == pytest.approx(85 / 80, abs=1e-3) and best["max"] == pytest.approx(1.25)
    assert goals["triserve_p99_vs_naive"]["met"] is True and goals["c1_p50_overhead_ms"]["met"] is False
    # a faster peer in one round raises the bar in that round only
    faster = _round(100, 40, 50, 80, 300, 400, 14.0, 120, 12.0)
    faster["mlserver"] = {"32": {"images_per_s": 95, "latency_ms": {"p50": None, "p90": None, "p99": None}}}
    assert cd.ratios_for_round(faster)["triserve_vs_best_peer"] == pytest.approx(100 / 95)
    assert "c=32" in goals["batching_on_vs_off"]["description"]
    missing = cd.ratios_for_round({"triserve": {}})
    assert all(v is None for v in missing.values())
    assert all(g["met"] is None for g in cd.evaluate_goals([missing]).values())


def test_summarise_table_and_histograms():
    rec = _round(100, 40, 50, 80, 300, 400, 14.0, 120, 12.0)
    rec["inproc"].update(best="intra0/b8", by_config={"intra0/b8": {"images_per_s": 120, "call_ms_p50": 60}},
                         single_call_stage_ms_p50={"run": 8.0})
    d = {"buckets": {"1": 1, "2-4": 3}, "count": 4, "sum": 10, "mean": 2.5}
    rec["batch_histograms"] = {"triserve": {"32": {"triserve_runner_batch_size": d}}}
    s = cd.summarise([rec, rec], list(cd.SYSTEMS), [1, 32], 32)
    assert s["table"]["triserve"]["32"]["images_per_s"]["median"] == 100
    assert s["table"]["inproc"]["ceiling_images_per_s"]["median"] == 120
    assert s["batch_histograms"]["triserve"]["32"]["triserve_runner_batch_size"]["count"] == 8
    assert s["goals"]["batching_on_vs_off"]["met"] is True


def test_kserve_and_mlserver_bodies_carry_the_same_image_and_parse_like_the_others():
    url, body = cd.request_for("kserve", "http://127.0.0.1:1", "QUJD")
    assert url.endswith("/v1/models/detector:predict")
    assert json.loads(body) == {"instances": [{"image_bytes": {"b64": "QUJD"}}]}
    assert cd.request_for("mlserver", "http://127.0.0.1:1", "QUJD") == cd.request_for("pytriton", "http://127.0.0.1:1",
                                                                                      "QUJD")
    kserve = {"predictions": [{"detections": [{"box": [1, 2, 3, 4], "score": 0.9, "class_id": 2, "label": "x"}]}]}
    assert cd.parse_detections("kserve", kserve) == [(2, [1.0, 2.0, 3.0, 4.0], 0.9)]
    v2 = {"outputs": [{"name": "count", "data": [0]}, {"name": "boxes", "data": [0, 0, 0, 0]},
                      {"name": "scores", "data": [0]}, {"name": "classes", "data": [-1]}]}
    assert cd.parse_detections("mlserver", v2) == []  # padding rows past "count" are not detections


def test_the_detection_comparison_measures_the_default_deployments_model():
    from triserve.configs.deployments import load_repository

    default = load_repository().default_for("detection")
    assert cd.SLOT == default.name and cd.MODEL == default.model.name and cd.FAMILY.model == cd.MODEL


def test_photo_mix_fits_real_photos_to_the_size_mix(tmp_path):
    for i, (w, h) in enumerate([(300, 500), (800, 200)]):  # a portrait and a wide photo
        Image.new("RGB", (w, h), (40 * i, 90, 200)).save(tmp_path / f"p{i}.png")
    (tmp_path / "notes.txt").write_text("not a photo")
    photos = cd.photo_files(tmp_path)
    assert [p.name for p in photos] == ["p0.png", "p1.png"] and cd.photo_files(tmp_path / "missing") == []
    mix = cd.photo_mix(photos, 5, seed=1)
    assert [im["b64"] for im in mix] == [im["b64"] for im in cd.photo_mix(photos, 5, seed=1)]
    assert [im["photo"] for im in mix] == ["p0.png", "p1.png", "p0.png", "p1.png", "p0.png"]
    assert [(im["width"], im["height"]) for im in mix] == cd.image_sizes(5, seed=1)
    for im in mix:
        with Image.open(io.BytesIO(base64.b64decode(im["b64"]))) as img:
            assert img.format == "JPEG" and img.size == (im["width"], im["height"])
    assert cd.describe_mix(mix, 1, 90, "photos/").startswith("photo mix (2 photos from photos/")
    assert "shapes each" in cd.describe_mix(cd.image_mix(2), 0, 90)


def test_fit_photo_crops_to_the_aspect_without_distortion():
    rgb = np.zeros((100, 400, 3), np.uint8)
    rgb[:, 150:250] = 255  # a white band in the middle of a wide photo
    out = cd.fit_photo(rgb, 64, 48)
    assert out.shape == (48, 64, 3)
    assert out[:, 32].min() == 255 and out[:, 0].max() == 0  # the centre kept, the sides cropped
