import numpy as np
import pytest

from triserve.families.vision.limits import BoxLimits as Limits
from triserve.families.vision.nms import NMSParams, nms, request_nms


def head(boxes_cxcywh, scores_per_class):
    """Build a [4+nc, anchors] head output."""
    return np.concatenate([np.asarray(boxes_cxcywh, dtype=np.float32).T,
                           np.asarray(scores_per_class, dtype=np.float32).T], axis=0)


def test_suppresses_overlaps_and_keeps_distinct_boxes():
    raw = head([[50, 50, 20, 20], [51, 51, 20, 20], [150, 150, 20, 20]],
               [[0.9, 0.0], [0.8, 0.0], [0.0, 0.7]])
    det = nms(raw, NMSParams(conf_threshold=0.25, iou_threshold=0.5))
    assert det.classes.tolist() == [0, 1]
    assert np.allclose(det.scores, [0.9, 0.7])
    assert np.allclose(det.boxes[0], [40, 40, 60, 60])


def test_class_aware_keeps_overlapping_boxes_of_other_classes():
    raw = head([[50, 50, 20, 20], [50, 50, 20, 20]], [[0.9, 0.0], [0.0, 0.8]])
    assert len(nms(raw, NMSParams(class_aware=True)).scores) == 2
    assert len(nms(raw, NMSParams(class_aware=False)).scores) == 1


def test_threshold_cap_and_max_detections():
    rng = np.random.default_rng(0)
    n = 5000
    centers = rng.uniform(0, 10_000, (n, 2))
    raw = head(np.c_[centers, np.full((n, 2), 5.0)], rng.uniform(0.3, 1.0, (n, 3)))
    det = nms(raw, NMSParams(conf_threshold=0.2, pre_nms_topk=300, max_detections=50))
    assert det.candidates == n
    assert len(det.scores) == 50
    assert np.all(np.diff(det.scores) <= 0)  # best first
    best = np.sort(raw[4:].max(axis=0))[::-1][:50]
    assert np.allclose(det.scores, best)  # disjoint boxes: the top scores survive the cap


def test_worst_case_all_anchors_above_threshold_is_bounded():
    """Every anchor of a 640px head above threshold and overlapping: work stays capped (timing lives in scripts/)."""
    rng = np.random.default_rng(1)
    n = 8400
    raw = head(np.c_[rng.uniform(300, 340, (n, 2)), rng.uniform(50, 60, (n, 2))], rng.uniform(0.5, 1, (n, 80)))
    det = nms(raw, NMSParams(conf_threshold=0.001, pre_nms_topk=1000, max_detections=100))
    assert det.candidates == n and 1 <= len(det.scores) <= 100


def test_no_candidates():
    raw = head([[5, 5, 2, 2]], [[0.1]])
    det = nms(raw, NMSParams(conf_threshold=0.5))
    assert det.boxes.shape == (0, 4) and det.candidates == 0


def _reference_greedy(raw: np.ndarray, params: NMSParams) -> list[tuple]:
    """Textbook one-box-at-a-time greedy NMS (class-aware by comparing classes), as the oracle for the blocked one."""
    scores_all = raw[4:]
    cls = scores_all.argmax(axis=0)
    sc = scores_all.max(axis=0)
    idx = [i for i in np.argsort(-sc, kind="stable") if sc[i] > params.conf_threshold][: params.pre_nms_topk]
    boxes = {i: (raw[0, i] - raw[2, i] / 2, raw[1, i] - raw[3, i] / 2, raw[0, i] + raw[2, i] / 2,
                 raw[1, i] + raw[3, i] / 2) for i in idx}

    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        return inter / max((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter, 1e-9)

    kept: list[int] = []
    for i in idx:
        if len(kept) == params.max_detections:
            break
        if all(cls[k] != cls[i] or iou(boxes[k], boxes[i]) <= params.iou_threshold for k in kept):
            kept.append(i)
    return [(int(cls[i]), round(float(sc[i]), 5)) for i in kept]


@pytest.mark.parametrize("seed,anchors,classes,max_det", [(0, 300, 2, 100), (1, 500, 1, 7), (2, 2000, 3, 100),
                                                          (3, 1000, 5, 64), (4, 200, 1, 200)])
def test_blocked_greedy_matches_one_box_at_a_time_greedy(seed, anchors, classes, max_det):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (2, anchors))
    wh = rng.uniform(5, 60, (2, anchors))
    raw = np.concatenate([xy, wh, rng.uniform(0, 1, (classes, anchors))]).astype(np.float32)
    params = NMSParams(conf_threshold=0.2, iou_threshold=0.5, pre_nms_topk=1500, max_detections=max_det)
    got = nms(raw, params)
    assert [(int(c), round(float(s), 5)) for c, s in zip(got.classes, got.scores)] == _reference_greedy(raw, params)


def test_end2end_heads_filter_sort_and_cap_without_nms():
    from triserve.families.vision.nms import decode, end2end

    raw = np.array([[10, 10, 50, 50, 0.9, 2], [12, 12, 52, 52, 0.8, 2],  # overlapping, both kept: the model chose
                    [0, 0, 5, 5, 0.1, 0], [60, 60, 90, 90, 0.95, 1], [0, 0, 0, 0, 0.0, 0]], dtype=np.float32)
    det = end2end(raw, NMSParams(conf_threshold=0.25, max_detections=2))
    assert det.candidates == 3 and det.scores.tolist() == pytest.approx([0.95, 0.9])
    assert det.classes.tolist() == [1, 2] and det.boxes[0].tolist() == [60, 60, 90, 90]
    assert len(decode(raw, "end2end", NMSParams(conf_threshold=0.25)).scores) == 3


def test_end2end_output_checks():
    from triserve.families.vision.nms import check_head
    from triserve.kernel.errors import InvalidOutput

    ok = np.array([[1, 1, 5, 5, 0.5, 2]], dtype=np.float32)
    check_head(ok, 3, "end2end")
    for bad in (ok[:, :5], ok * np.array([1, 1, 1, 1, 3, 1], dtype=np.float32),
                ok * np.array([1, 1, 1, 1, 1, 5], dtype=np.float32), ok * np.nan):
        with pytest.raises(InvalidOutput):
            check_head(bad, 3, "end2end")


def test_request_nms_takes_the_limits_defaults_and_caps_the_detections():
    limits = Limits(conf_threshold=0.3, iou_threshold=0.5, max_detections=50, pre_nms_topk=200)
    assert request_nms(limits) == NMSParams(0.3, 0.5, 200, 50, True)
    assert request_nms(limits, 0.01, 0.9, 500, False) == NMSParams(0.01, 0.9, 200, 50, False)  # capped at 50
    assert request_nms(limits, max_detections=7).max_detections == 7


# --- what the runner sends back of an anchor head (prefilter): NMS of the columns == NMS of the whole head --------
def realistic_head(seed: int, anchors: int = 2000, classes: int = 5, hot: float = 0.0,
                   background: tuple[float, float] = (-6, 2)) -> np.ndarray:
    """Boxes scattered over a 640 input, sigmoid class scores mostly low, a few confident clusters; `hot` adds a
    share of anchors with high scores (a degenerate image above every cap)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 640, (anchors, 2))
    sizes = rng.uniform(8, 200, (anchors, 2))
    logits = rng.normal(*background, (anchors, classes))
    objects = rng.choice(anchors, 40, replace=False)
    logits[objects, rng.integers(0, classes, 40)] = rng.normal(2, 1.5, 40)
    if hot:
        logits[rng.random(anchors) < hot] += 8
    scores = 1 / (1 + np.exp(-logits))
    return head(np.concatenate([centres, sizes], axis=1), scores)


def same_detections(a, b) -> None:
    np.testing.assert_array_equal(a.classes, b.classes)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.boxes, b.boxes)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("conf", "topk", "class_aware", "hot"), [
    (0.25, 1000, True, 0.0), (0.001, 1000, True, 0.0), (0.5, 1000, False, 0.0), (0.0, 1000, True, 0.0),
    (0.25, 30, True, 0.0), (0.25, 1000, True, 0.9), (0.1, 64, False, 0.5)])
def test_nms_of_the_prefiltered_columns_keeps_what_nms_of_the_whole_head_keeps(seed, conf, topk, class_aware, hot):
    from triserve.families.vision.nms import prefilter, runner_keep

    raw = realistic_head(seed, hot=hot)
    params = NMSParams(conf_threshold=conf, pre_nms_topk=topk, max_detections=100, class_aware=class_aware)
    keep = runner_keep(params)
    cut = prefilter(raw, 5, keep["conf"], keep["count_above"], keep["topk"])
    assert cut is not None
    columns, candidates = cut
    whole = nms(raw, params)
    assert columns.shape[0] == raw.shape[0] and columns.shape[1] <= keep["topk"]
    assert candidates == whole.candidates
    same_detections(nms(columns, params), whole)
    if conf >= 0.25:  # a shadow's agreement is judged at the default thresholds: the columns serve that too
        same_detections(nms(columns, NMSParams()), nms(raw, NMSParams()))


def test_prefilter_cuts_a_typical_head_to_a_few_columns():
    from triserve.families.vision.nms import prefilter

    raw = realistic_head(0, anchors=8400, classes=80, background=(-9, 1))  # max of 80 background logits ~ -6.6
    columns, candidates = prefilter(raw, 80, 0.25, 0.25, 1000)
    assert candidates == columns.shape[1] <= 40 and raw.nbytes / columns.nbytes > 200


@pytest.mark.parametrize("spoil", ["nan_box", "inf_score", "score_above_one", "negative_score", "shape"])
def test_a_head_unfit_to_cut_goes_back_whole(spoil):
    """The runner never hides a broken output: the gateway's output check must see it."""
    from triserve.families.vision.nms import prefilter

    raw = realistic_head(1)
    if spoil == "nan_box":
        raw[0, 7] = np.nan  # an anchor far below every threshold: cutting would drop it unseen
    elif spoil == "inf_score":
        raw[5, 3] = np.inf
    elif spoil == "score_above_one":
        raw[6, 11] = 1.5
    elif spoil == "negative_score":
        raw[4, 2] = -0.5
    else:
        raw = raw[:6]
    assert prefilter(raw, 5, 0.25, 0.25, 1000) is None


def test_equal_scores_rank_by_anchor_whichever_array_they_come_from():
    """A degenerate head (every anchor the same score, above the cap): the cap keeps the same anchors and NMS the
    same order, cut or whole."""
    from triserve.families.vision.nms import prefilter

    boxes = [[20 * i + 10, 20 * i + 10, 8, 8] for i in range(50)]
    raw = head(boxes, [[0.9, 0.0]] * 50)
    params = NMSParams(pre_nms_topk=10)
    columns, candidates = prefilter(raw, 2, 0.25, 0.25, 10)
    assert candidates == 50
    same_detections(nms(columns, params), nms(raw, params))
    assert nms(raw, params).boxes[:, 0].tolist() == [20 * i + 6 for i in range(10)]  # the first ten anchors
