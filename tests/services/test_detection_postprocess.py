import numpy as np

from services.detection.postprocess import NMSParams, nms


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
