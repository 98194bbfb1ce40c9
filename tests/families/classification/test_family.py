"""The family's contract without a server: registered with its routes, typed limits, the crop torchvision makes, the
runner's normalisation, bad input refused with a machine-readable 4xx before the runner."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

import triserve.configs.families
from tests.families.hooks import refusal, view
from triserve import families
from triserve.families.classification.limits import Limits
from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.classification.postprocess import probabilities, top_k
from triserve.families.classification.preprocess import crop
from triserve.families.classification.runtime import network_batch
from triserve.families.classification.schemas import ClassifyImageUpload


def png(w: int, h: int, rgb=(0, 0, 0)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), rgb).save(buf, format="PNG")
    return buf.getvalue()


def test_registered_with_routes_grpc_method_and_batch_command():
    fam = families.family("classification")
    assert fam.api.grpc_method == "ClassifyImage" and fam.api.oip.alias == "classify-image"
    assert [r.path for r in fam.api.routes] == ["/v1/classify-image", "/v1/classify-image/upload"]
    adapter = triserve.configs.families.batch_adapter("classification")
    assert (adapter.COMMAND, adapter.SOURCE, adapter.FAMILY) == ("classify-image", "images", "classification")


def test_preprocess_record_is_checked():
    assert ClassificationPreprocess(imgsz=224, resize_size=256).crop_from == 256
    with pytest.raises(ValidationError):
        ClassificationPreprocess(imgsz=224, resize_size=200)
    with pytest.raises(ValidationError):
        ClassificationPreprocess(imgsz=224, std=(1, 0, 1))


@pytest.mark.parametrize("size", [(300, 200), (200, 301), (257, 256), (224, 224), (999, 17)])
def test_crop_is_torchvisions_resize_and_center_crop(size):
    from torchvision import transforms as T

    rng = np.random.default_rng(size[0])
    image = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    pre = ClassificationPreprocess(imgsz=224, resize_size=256)
    ref = np.asarray(T.Compose([T.Resize(256), T.CenterCrop(224)])(Image.fromarray(image)))
    assert np.array_equal(crop(image, pre), ref)


def test_runner_normalises_with_the_manifest():
    pre = ClassificationPreprocess(imgsz=2, scale=1.0, mean=(127, 127, 127), std=(128, 128, 128), color_order="BGR")
    item = np.array([[[255, 0, 127]] * 2] * 2, dtype=np.uint8)
    x = network_batch([item], pre)[0]
    assert x.shape == (3, 2, 2) and np.allclose(x[:, 0, 0], [0.0, -127 / 128, 1.0])  # B, G, R
    fitted = np.zeros((1, 2, 3), np.uint8)  # a letterboxed item: padded with pad_value, normalised too
    boxed = network_batch([fitted], ClassificationPreprocess(imgsz=2, resize="letterbox", pad_value=255))[0]
    assert np.allclose(boxed[:, 0, :], 0) and np.allclose(boxed[:, 1, :], 1)


def test_logits_become_probabilities_and_top_k_is_stable():
    p = probabilities(np.array([1.0, 3.0, 3.0, -2.0]), "logits")
    assert p.sum() == pytest.approx(1) and list(top_k(p, 3)) == [1, 2, 0]


@pytest.mark.parametrize("request_, limits, status, code", [
    (ClassifyImageUpload(images=[png(8, 8)] * 3), {"max_images": 2}, 422, "too_many_images"),
    (ClassifyImageUpload(images=[png(200, 100)]), {"max_pixels": 10_000}, 422, "image_too_many_pixels"),
    (ClassifyImageUpload(images=[b"not an image"]), {}, 422, "invalid_image"),
    (ClassifyImageUpload(images=[png(8, 8)], top_k=30), {"max_top_k": 20}, 422, "top_k_too_large"),
    (ClassifyImageUpload(images=[png(8, 8)]), {}, None, None),
])
def test_bad_input_is_a_4xx_before_the_runner(request_, limits, status, code):
    fam = families.family("classification")
    if status is None:
        assert fam.validate(view(Limits(**limits)), request_)[0].shape == (8, 8, 3)
        return
    err = refusal(fam, Limits(**limits), request_)  # the lifecycle, no context: the runner is never reached
    assert err.status == status and err.code == code


def test_an_elongated_image_is_refused_before_its_resize():
    from triserve.kernel.errors import ApiError

    with pytest.raises(ApiError) as err:
        crop(np.zeros((1, 4000, 3), np.uint8), ClassificationPreprocess(imgsz=224), 0, max_pixels=1_000_000)
    assert err.value.status == 422 and err.value.code == "image_too_elongated"
