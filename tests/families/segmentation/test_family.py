"""The family's contract: registered, typed limits, bad input refused with a machine-readable 4xx before the runner,
the typed gRPC messages carry masks and polygons."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from tests.families.hooks import refusal, view
from triserve import families
from triserve.families.segmentation.limits import Limits
from triserve.families.segmentation.schemas import RLE, ImageResult, Instance, Polygon, SegmentResponse, SegmentUpload
from triserve.kernel.schemas import ModelInfo


def png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_registered_with_routes_and_grpc_method():
    fam = families.family("segmentation")
    assert fam.api.grpc_method == "Segment" and fam.api.oip.alias == "segment"
    assert [r.path for r in fam.api.routes] == ["/v1/segment", "/v1/segment/upload"]


def test_limits_are_typed():
    assert Limits().mask_format == "rle"
    with pytest.raises(ValidationError):
        Limits(mask_format="bitmap")
    with pytest.raises(ValidationError):
        Limits(max_detections=0)
    with pytest.raises(ValidationError):
        SegmentUpload(images=[b"x"], mask_format="png")


def test_max_detections_is_capped_by_the_limits():
    p = families.family("segmentation").nms_params(view(Limits(max_detections=50)),
                                                   SegmentUpload(images=[b"x"], max_detections=500))
    assert p.max_detections == 50 and p.conf_threshold == 0.25


@pytest.mark.parametrize("request_, limits, status, code", [
    (SegmentUpload(images=[png(8, 8)] * 3), {"max_images": 2}, 422, "too_many_images"),
    (SegmentUpload(images=[png(200, 100)]), {"max_pixels": 10_000}, 422, "image_too_many_pixels"),
    (SegmentUpload(images=[b"not an image"]), {}, 422, "invalid_image"),
    (SegmentUpload(images=[png(8, 8)]), {"max_image_bytes": 1024}, None, None),
])
def test_bad_input_is_a_4xx_before_the_runner(request_, limits, status, code):
    fam = families.family("segmentation")
    if status is None:
        assert fam.validate(view(Limits(**limits)), request_)[0].shape == (8, 8, 3)
        return
    err = refusal(fam, Limits(**limits), request_)  # the lifecycle, no context: the runner is never reached
    assert err.status == status and err.code == code


def test_typed_grpc_messages_carry_rle_and_polygons():
    from triserve.services.protocols.generated import triserve_pb2
    from triserve.services.protocols.grpc_typed import message_fields, to_message

    inst = Instance(box=[0, 0, 2, 2], score=0.9, class_id=0, label="plate", area=4,
                    rle=RLE(size=[3, 4], counts="022"), polygons=[Polygon(points=[0, 0, 1, 0, 1, 1])])
    resp = SegmentResponse(request_id="r", deployment="plates", model=ModelInfo(name="plates", version="1"),
                           degraded=False, timings={},
                           results=[ImageResult(width=4, height=3, candidates=1, instances=[inst])])
    got = to_message(resp, triserve_pb2.SegmentResponse()).results[0].instances[0]
    assert got.rle.counts == "022" and list(got.rle.size) == [3, 4]
    assert list(got.polygons[0].points) == [0, 0, 1, 0, 1, 1]
    req = triserve_pb2.SegmentRequest(images=[b"abc"], mask_format="both", max_detections=5)
    assert SegmentUpload(**message_fields(req)).mask_format == "both"
