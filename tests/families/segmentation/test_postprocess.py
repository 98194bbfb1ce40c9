"""Packed rows -> instances: textbook cases with exact masks, the layout check, polygons, capped work."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.segmentation import rle
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.masks import iter_instance_masks, polygons, sample_spans
from triserve.families.segmentation.postprocess import image_result, instances, row_size, split_row
from triserve.families.vision.letterbox import letterbox
from triserve.families.vision.nms import NMSParams
from triserve.kernel.errors import InvalidOutput

PRE = SegmentationPreprocess(imgsz=64, anchors=84, mask_dim=1, proto_size=16)  # 8^2 + 4^2 + 2^2 anchors
NC = 2


def packed(boxes_cxcywh=(), scores=(), classes=(), proto=None) -> np.ndarray:
    """A row: head [4 + 2 + 1, 84] (the listed anchors first, coefficient 1), then one 16x16 prototype."""
    head = np.zeros((4 + NC + 1, PRE.anchors), np.float32)
    for i, (box, s, c) in enumerate(zip(boxes_cxcywh, scores, classes)):
        head[:4, i] = box
        head[4 + c, i] = s
        head[4 + NC, i] = 1.0
    proto = np.full((1, 16, 16), -1.0, np.float32) if proto is None else proto
    return np.concatenate([head.reshape(-1), proto.reshape(-1)])


def rect_proto() -> np.ndarray:
    """+1 on prototype columns 2..9 (every row), else -1: with stride 4 and bilinear sampling at pixel centres the
    zero crossing falls exactly between pixels 7|8 and 39|40, so the mask is columns 8..39 within the box's rows.
    (A band, not a rectangle of cells: at a rectangle's corners bilinear logits cut the corner pixel, as in
    ultralytics.)"""
    p = np.full((1, 16, 16), -1.0, np.float32)
    p[0, :, 2:10] = 1.0
    return p


def meta_identity():
    _, meta = letterbox(np.zeros((64, 64, 3), np.uint8), 64)
    return meta


def test_empty_image_gives_no_instances():
    res = image_result(packed(), meta_identity(), PRE, ["a", "b"], NMSParams(), "both", 100)
    assert res.instances == [] and res.candidates == 0 and (res.width, res.height) == (64, 64)


def test_one_instance_whose_mask_is_a_known_rectangle_round_trips_exactly():
    row = packed([(32, 32, 56, 56)], [0.9], [1], rect_proto())  # box 4..60 covers the rectangle
    res = image_result(row, meta_identity(), PRE, ["a", "b"], NMSParams(), "rle", 100)
    (inst,) = res.instances
    expected = np.zeros((64, 64), bool)
    expected[4:60, 8:40] = True  # the box's rows, the band's columns
    assert inst.label == "b" and inst.class_id == 1 and inst.box == [4.0, 4.0, 60.0, 60.0]
    assert inst.rle is not None and inst.polygons is None and inst.area == expected.sum()
    assert inst.rle.size == [64, 64] and inst.rle.counts == rle.encode(expected)["counts"]
    back = rle.decode_counts(rle.string_to_counts(inst.rle.counts), 64, 64)
    assert (back == expected).all()


def test_mask_is_cropped_to_its_box():
    row = packed([(23, 23, 14, 14)], [0.9], [0], rect_proto())  # box 16..30
    _, _, (m,), _ = instances(row, meta_identity(), PRE, NC, NMSParams())
    expected = np.zeros((64, 64), bool)
    expected[16:30, 16:30] = True  # the band (columns 8..39) inside the box
    assert (m.x0, m.y0, m.crop.shape) == (16, 16, (14, 14)) and (m.full() == expected).all()


def test_masks_map_back_through_the_letterbox_to_original_pixels():
    # a 128x64 (w x h) original: scale 0.5, 16 px of padding above and below in the 64x64 network input
    _, meta = letterbox(np.zeros((64, 128, 3), np.uint8), 64)
    assert (meta.scale_x, meta.pad_y) == (0.5, 16)
    p = np.full((1, 16, 16), -1.0, np.float32)
    p[0, 6:10, :] = 1.0  # network rows 24..39 -> original rows (24 - 16) / 0.5 = 16 .. 47
    row = packed([(32, 32, 64, 64)], [0.9], [0], p)
    _, boxes, (m,), _ = instances(row, meta, PRE, NC, NMSParams())
    expected = np.zeros((64, 128), bool)
    expected[16:48, :] = True
    assert (m.full() == expected).all()
    assert boxes[0].tolist() == [0.0, 0.0, 128.0, 64.0]


def test_polygons_of_a_rectangle():
    row = packed([(32, 32, 56, 56)], [0.9], [0], rect_proto())
    res = image_result(row, meta_identity(), PRE, ["a", "b"], NMSParams(), "polygons", 100)
    (inst,) = res.instances
    assert inst.rle is None and inst.polygons is not None and len(inst.polygons) == 1
    pts = np.array(inst.polygons[0].points).reshape(-1, 2)
    assert sorted(map(tuple, pts.tolist())) == sorted([(8, 4), (8, 59), (39, 59), (39, 4)])


def test_polygon_points_are_capped():
    _, _, (m,), _ = instances(packed([(32, 32, 64, 64)], [0.9], [0],
                                  np.where(np.indices((16, 16)).sum(0) % 2 == 0, 1.0, -1.0)[None]
                                  .astype(np.float32)), meta_identity(), PRE, NC, NMSParams())
    assert sum(len(p) // 2 for p in polygons(m, 10_000)) > 40
    assert sum(len(p) // 2 for p in polygons(m, 40)) <= 40


def test_max_detections_caps_the_masks_made():
    n = 50
    boxes = [(4 + (i % 8) * 7, 4 + (i // 8) * 7, 6, 6) for i in range(n)]  # disjoint: NMS keeps all
    row = packed(boxes, [0.5 + i / 1000 for i in range(n)], [0] * n, rect_proto())
    kept, _, masks, _ = instances(row, meta_identity(), PRE, NC, NMSParams(max_detections=7))
    assert len(masks) == 7 and kept.detections.candidates == n


def test_layout_mismatch_is_an_invalid_output():
    assert row_size(PRE, NC) == 7 * 84 + 256
    with pytest.raises(InvalidOutput):
        split_row(np.zeros(row_size(PRE, NC) - 1, np.float32), PRE, NC)


def test_mask_run_budget_is_spent_in_score_order_and_skipped_instances_say_so():
    boxes = [(16, 16, 32, 32), (48, 48, 16, 16), (48, 16, 16, 16)]  # 32x32, 16x16, 16x16 pixel boxes
    row = packed(boxes, [0.9, 0.8, 0.7], [0, 0, 0], rect_proto())
    _, _, _, all_counts = instances(row, meta_identity(), PRE, NC, NMSParams())
    sizes = [c.size for c in all_counts if c is not None]
    assert len(sizes) == 3
    budget = sizes[0] + sizes[1]  # exactly the first two masks' runs
    _, _, masks, counts = instances(row, meta_identity(), PRE, NC, NMSParams(), max_mask_runs=budget)
    assert [m is None for m in masks] == [False, False, True] and counts[2] is None
    res = image_result(row, meta_identity(), PRE, ["a", "b"], NMSParams(), "rle", 100, budget)
    assert res.masks_skipped == 1 and res.instances[2].mask_skipped and res.instances[2].rle is None
    assert res.instances[2].box == [40.0, 8.0, 56.0, 24.0] and not res.instances[0].mask_skipped
    # one run short: the second mask does not fit, and nothing after it is made either (the work stops there)
    _, _, masks, _ = instances(row, meta_identity(), PRE, NC, NMSParams(), max_mask_runs=budget - 1)
    assert [m is None for m in masks] == [False, True, True]


def test_sample_spans_partition_the_box_within_the_budget():
    assert sample_spans(10, 20, 200) == (None, None)  # fits: one sample per pixel
    rows, cols = sample_spans(616, 624, 16_384)
    assert rows is not None and cols is not None
    assert (len(rows) - 1) * (len(cols) - 1) <= 16_384 and rows[0] == cols[0] == 0
    assert rows[-1] == 616 and cols[-1] == 624 and (np.diff(rows) >= 1).all() and (np.diff(cols) >= 1).all()


def test_a_band_on_a_sample_grid_is_the_same_mask():
    # the band's edges (pixel columns 8 | 40) fall on span edges of a 2-pixel grid: sampling changes nothing
    row = packed([(32, 32, 56, 56)], [0.9], [1], rect_proto())  # box 4..60: 56 x 56 pixels
    _, _, (exact,), _ = instances(row, meta_identity(), PRE, NC, NMSParams())
    _, _, (sampled,), _ = instances(row, meta_identity(), PRE, NC, NMSParams(), max_mask_samples=28 * 28)
    assert exact.rows is None and sampled.rows is not None and sampled.crop.shape == (28, 28)
    assert (sampled.full() == exact.full()).all() and sampled.area == exact.area == 56 * 32
    res = image_result(row, meta_identity(), PRE, ["a", "b"], NMSParams(), "both", 100, None, 28 * 28)
    (inst,) = res.instances
    assert inst.rle is not None and inst.rle.counts == rle.encode(exact.full())["counts"]
    assert inst.polygons is not None and len(inst.polygons) == 1


@pytest.mark.parametrize("seed", range(5))
def test_sampled_rle_is_the_rle_of_the_sampled_mask_and_close_to_the_exact_one(seed):
    """Large boxes on smooth random prototypes: the encoder's span arithmetic against a plain encode of the
    expanded mask, and the sampled mask against the per-pixel one."""
    import cv2

    rng = np.random.default_rng(seed)
    protos = np.stack([cv2.resize(c, (160, 160), interpolation=cv2.INTER_LINEAR)
                       for c in rng.standard_normal((32, 6, 6)).astype(np.float32)])
    _, meta = letterbox(np.zeros((480, 640, 3), np.uint8), 640)
    box = np.array([rng.uniform(0, 100), rng.uniform(0, 100), rng.uniform(400, 640), rng.uniform(300, 480)])
    coef = rng.standard_normal((1, 32)).astype(np.float32)
    exact = next(iter_instance_masks(coef, protos, box[None], meta, 640))
    sampled = next(iter_instance_masks(coef, protos, box[None], meta, 640, 4096))
    assert sampled.crop.size <= 4096 < exact.crop.size
    full = sampled.full()
    counts = rle.crop_counts(sampled.crop, sampled.x0, sampled.y0, 480, 640, sampled.rows, sampled.cols)
    assert counts.tolist() == rle.mask_counts(full).tolist() and sampled.area == full.sum()
    iou = (full & exact.full()).sum() / (full | exact.full()).sum()
    assert iou > 0.95
