"""The INT8 sibling's gate: instances matched against the FP32 graph's, their masks compared, evidence required."""
from __future__ import annotations

import numpy as np

from triserve.families.segmentation.importers.fallback import Int8Gates, judge
from triserve.families.segmentation.importers.verify import SegPrediction
from triserve.models.importing.agreement import Dets


def pred(boxes, masks) -> SegPrediction:
    n = len(boxes)
    return SegPrediction(Dets(np.array(boxes, np.float64).reshape(-1, 4), np.full(n, 0.9, np.float32),
                              np.zeros(n, np.int64)), masks)


def square(x0, y0, s, shape=(40, 40)):
    m = np.zeros(shape, bool)
    m[y0:y0 + s, x0:x0 + s] = True
    return m


def test_identical_predictions_pass_and_a_lost_instance_or_a_shifted_mask_fails():
    boxes = [[0, 0, 10, 10], [20, 20, 30, 30]]
    fp32 = [pred(boxes, [square(0, 0, 10), square(20, 20, 10)])] * 3
    metrics, why = judge(fp32, fp32, ["a", "b", "c"], Int8Gates(min_reference_instances=6))
    assert why == [] and metrics["fp32_agreement_share"] == 1.0 and metrics["fp32_mean_mask_iou"] == 1.0
    lost = [pred(boxes[:1], [square(0, 0, 10)])] * 3
    _, why = judge(fp32, lost, ["a", "b", "c"], Int8Gates(min_reference_instances=6, min_share=0.8))
    assert any("share" in w for w in why)  # 2 x 3 / (6 + 3) = 0.67
    shifted = [pred(boxes, [square(4, 4, 10), square(24, 24, 10)])] * 3
    metrics, why = judge(fp32, shifted, ["a", "b", "c"], Int8Gates(min_reference_instances=6))
    assert any("mask IoU" in w for w in why) and metrics["fp32_mean_mask_iou"] < 0.5


def test_too_few_reference_instances_is_no_evidence():
    one = [pred([[0, 0, 10, 10]], [square(0, 0, 10)])]
    _, why = judge(one, one, ["a"], Int8Gates(min_reference_instances=5))
    assert any("nothing to judge" in w for w in why)
