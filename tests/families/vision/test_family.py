"""The vision base's shared hooks and declarations: what an image family derives from its routes, the runtime's
warm-up sizes, the box agreement, and the raw-tensor checks every image family runs."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.families.hooks import view
from triserve import families
from triserve.families.vision.manifest import LetterboxPreprocess
from triserve.families.vision.nms import Detections, box_agreement
from triserve.families.vision.runtime import warmup_sizes
from triserve.kernel.errors import ApiError


@pytest.mark.parametrize("name, alias, parameters", [
    ("detection", "detect", {"conf_threshold", "iou_threshold", "max_detections", "class_aware", "model"}),
    ("pose", "pose", {"conf_threshold", "iou_threshold", "max_detections", "model"}),
    ("segmentation", "segment", {"conf_threshold", "iou_threshold", "max_detections", "class_aware", "mask_format",
                                 "model"}),
    ("classification", "classify-image", {"top_k", "model"}),
])
def test_the_oip_name_and_parameters_come_from_the_routes(name, alias, parameters):
    fam = families.family(name)
    assert fam.api.oip.alias == alias and set(fam.api.oip.parameters) == parameters
    assert [r.content_type for r in fam.api.routes] == ["application/json", "multipart/form-data"]
    assert fam.api.routes[1].path == fam.api.routes[0].path + "/upload" and fam.api.routes[1].files == "images"


def manifest(shape: list) -> SimpleNamespace:
    return SimpleNamespace(preprocess=LetterboxPreprocess(imgsz=320), inputs=[SimpleNamespace(shape=shape)])


def test_warmup_sizes_are_the_square_side_on_the_named_spatial_axes():
    assert warmup_sizes(manifest(["batch", 3, "height", "width"])) == {"height": (320,), "width": (320,)}
    assert warmup_sizes(manifest(["batch", 3, "h", "w"])) == {"h": (320,), "w": (320,)}
    assert warmup_sizes(manifest([1, 3, 320, 320])) == {}


def dets(*boxes: tuple[float, float, float, float, int]) -> Detections:
    arr = np.asarray([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    classes = np.asarray([b[4] for b in boxes], np.int64)
    return Detections(arr, np.ones(len(boxes), np.float32), classes, len(boxes))


def test_box_agreement_matches_by_class_and_iou_over_the_larger_count():
    a = dets((0, 0, 10, 10, 0), (20, 20, 30, 30, 1))
    assert box_agreement(a, a) == 1.0 and box_agreement(dets(), dets()) == 1.0
    assert box_agreement(a, dets((0, 0, 10, 10, 0))) == 0.5  # one box missing
    assert box_agreement(a, dets((0, 0, 10, 10, 1), (20, 20, 30, 30, 1))) == 0.5  # a class changed
    assert box_agreement(a, dets((5, 5, 15, 15, 0), (20, 20, 30, 30, 1))) == 0.5  # IoU 1/7 < 0.5


@pytest.mark.parametrize("name", ["detection", "pose", "segmentation", "classification"])
def test_raw_tensors_are_checked_against_the_served_input(name):
    fam = families.family(name)
    limits = families.limits_model(name)(max_images=2)
    spec = SimpleNamespace(name="images", shape=["batch", 3, 32, 32])
    served = SimpleNamespace(manifest=SimpleNamespace(inputs=[spec], preprocess=SimpleNamespace(imgsz=32)))
    items = fam.api.oip.tensor_items(view(limits), served, {"images": np.zeros((2, 3, 32, 32))}, batch_cap=8)
    assert len(items) == 2 and items[0].dtype == np.float32 and items[0].shape == (3, 32, 32)
    for arr, status, code in [(np.zeros((1, 3, 16, 16)), 400, "shape_mismatch"),
                              (np.zeros((3, 3, 32, 32)), 422, "too_many_items"),
                              (np.full((1, 3, 32, 32), np.nan), 422, "non_finite_value")]:
        with pytest.raises(ApiError) as err:
            fam.api.oip.tensor_items(view(limits), served, {"images": arr}, batch_cap=8)
        assert (err.value.status, err.value.code) == (status, code)
