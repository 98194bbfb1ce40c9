"""The hooks every image family shares (kernel/family.Family): the request's images decoded within the deployment's
limits, a graph's own [n, 3, S, S] tensors checked against the served version, the two REST routes (base64 JSON and
multipart upload), and for the letterboxed box families the fitted items and each image's kept boxes."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from triserve.families.vision.decode import decode_images
from triserve.families.vision.letterbox import LetterboxMeta, fit
from triserve.families.vision.manifest import ImagePreprocess, LetterboxPreprocess
from triserve.families.vision.nms import Detections, NMSParams, request_nms
from triserve.kernel.family import Answer, DeploymentView, Family, FamilyApi, OipSurface, RestRoute
from triserve.kernel.tensors import TensorMeta, bad_request, check_batch, check_finite
from triserve.models.manifest import preprocess_as

T = TypeVar("T")


IMAGE_INPUTS = (TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True),)
LETTERBOXED = "letterboxed RGB scaled to [0, 1]"


def image_routes(path: str, body: type[BaseModel], options: type[BaseModel], what: str) -> tuple[RestRoute, ...]:
    """`path` taking base64 images in a JSON body and `path`/upload taking image files as multipart form data."""
    return (RestRoute(path, "application/json", body, f"{what} in base64-encoded images"),
            RestRoute(f"{path}/upload", "multipart/form-data", options,
                      f"{what} in uploaded image files (multipart/form-data, field 'images')",
                      files="images", files_description="One or more image files."))


@dataclass(frozen=True)
class ImageOip(OipSurface):
    """An image family on OIP: encoded images in (IMAGE), and as a raw tensor model the graph's own [n, 3, S, S]
    float tensors, checked against the served version."""

    tensor_note: str = LETTERBOXED  # what a raw input tensor must hold

    def tensor_items(self, view, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = preprocess_as(served.manifest, ImagePreprocess).imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] "
                              f"({self.tensor_note}), got {list(arr.shape)}",
                              {"expected": list(spec.shape), "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, view.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


def image_api(path: str, what: str, *, upload: type[BaseModel], body: type[BaseModel], options: type[BaseModel],
              response: type[BaseModel], grpc_method: str, outputs: tuple[TensorMeta, ...],
              oip: type[ImageOip] = ImageOip, tensor_note: str = LETTERBOXED) -> FamilyApi:
    """An image family's whole surface from its path: the two REST routes (image_routes), the request model built
    from transport fields (`upload`: options + image bytes), and on OIP the model named after the JSON route's
    operation (/v1/detect -> detect) taking the upload's options but the deployment (the OIP model name names it)
    as parameters."""
    return FamilyApi(request_model=upload, response_model=response, routes=image_routes(path, body, options, what),
                     grpc_method=grpc_method,
                     oip=oip(alias=path.rsplit("/", 1)[-1], inputs=IMAGE_INPUTS, outputs=outputs,
                             parameters=tuple(f for f in options.model_fields if f != "deployment"),
                             tensor_note=tensor_note))


class ImageFamily(Family):
    """A family whose requests carry encoded images (`images`), decoded within the deployment's limits."""

    def validate(self, view: DeploymentView, request: Any) -> list[np.ndarray]:
        """Every image cap (count, bytes, pixels) before the runner; RGB arrays."""
        return decode_images(request.images, view.limits)


class BoxFamily(ImageFamily):
    """An image family with a YOLO head behind the letterbox: the runner gets each image fitted (uint8, padded there:
    runtime.feeds), capped NMS keeps the boxes, boxes map back to the original pixels."""

    def items(self, view, work, model):
        imgsz = preprocess_as(model.manifest, LetterboxPreprocess).imgsz
        tensors, metas = zip(*(fit(im, imgsz) for im in work))
        return list(tensors), list(metas)

    @staticmethod
    def nms_params(view: DeploymentView, request: Any) -> NMSParams:
        """A request's NMS settings within its deployment's limits."""
        return request_nms(view.limits, request.conf_threshold, request.iou_threshold, request.max_detections,
                           getattr(request, "class_aware", True))

    @staticmethod
    def kept(view: DeploymentView, request: Any, answer: Answer, decode: Callable[[np.ndarray], T],
             boxes: Callable[[T], Detections]) -> Iterator[tuple[T, LetterboxMeta, int]]:
        """Each image of one runner answer decoded (`decode` of its raw output), with its letterbox and its
        candidates count (what the runner counted before it cut the head, else the decoder's); the boxes' drift
        signals observed when the request used the default thresholds (the drift reference's)."""
        result, metas = answer.result, answer.state
        observe = request.conf_threshold is None
        for raw, meta, facts in zip(result.outputs, metas, result.facts or [{}] * len(metas)):
            decoded = decode(np.asarray(raw))
            det = boxes(decoded)
            if observe:
                view.observe(result.model, "confidence", det.scores.tolist())
                view.observe(result.model, "boxes_per_image", [len(det.scores)])
            yield decoded, meta, facts.get("candidates", det.candidates)
