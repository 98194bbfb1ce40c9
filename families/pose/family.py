"""The pose family: YOLO pose heads [4 + classes + K * dims, anchors] behind letterbox, capped NMS on the boxes (the
detection family's), keypoints mapped back like the boxes, with the model's keypoint names and skeleton."""
from __future__ import annotations

import json

import numpy as np

from families.detection.family import box_agreement
from families.detection.postprocess import NMSParams
from families.pose.manifest import PosePreprocess
from families.pose.postprocess import check_pose_head, decode_pose
from families.pose.schemas import PoseOptions, PoseRequest, PoseResponse, PoseUpload
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite
from models.manifest import preprocess_as


def pose_agreement(served: np.ndarray, shadow: np.ndarray, nc: int, kpt_shape: tuple[int, int],
                   max_px: float = 8.0) -> float:
    """The detection family's box agreement on the instance boxes, times the share of the served instances' keypoints
    that the shadow places within `max_px` network pixels (instances paired by the same NMS order; a changed count
    already lowers the box agreement)."""
    k = kpt_shape[0] * kpt_shape[1]
    boxes = box_agreement(served[:-k], shadow[:-k])
    a, b = (decode_pose(x, nc, kpt_shape, NMSParams()) for x in (served, shadow))
    n = min(len(a.det.scores), len(b.det.scores))
    if n == 0:
        return boxes
    dist = np.linalg.norm(a.keypoints[:n, :, :2] - b.keypoints[:n, :, :2], axis=-1)
    return boxes * float((dist <= max_px).mean())


def _keypoints_value(response: PoseResponse) -> list[str]:
    return [x.model_dump_json() for x in response.results]


class PoseFamily(Family):
    name = "pose"
    request_model = PoseUpload
    response_model = PoseResponse
    routes = (RestRoute("/v1/pose", "application/json", PoseRequest,
                        "Estimate people's poses (boxes and keypoints) in base64-encoded images"),
              RestRoute("/v1/pose/upload", "multipart/form-data", PoseOptions,
                        "Estimate poses in uploaded image files (multipart/form-data, field 'images')",
                        files="images", files_description="One or more image files."))
    oip_alias = "pose"
    oip_pipeline_inputs = (TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True),)
    oip_pipeline_outputs = (TensorMeta("POSES", "BYTES", (-1,), value=_keypoints_value),)
    oip_parameters = ("conf_threshold", "iou_threshold", "max_detections", "model")
    grpc_method = "Pose"

    def pipeline(self, ctx, deployment):
        from families.pose.pipeline import PosePipeline

        return PosePipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        kpt_shape = preprocess_as(manifest, PosePreprocess).kpt_shape
        for raw in outputs:
            check_pose_head(raw, len(manifest.labels), kpt_shape)

    def agreement(self, manifest, served, shadow):
        return pose_agreement(served, shadow, len(manifest.labels), preprocess_as(manifest, PosePreprocess).kpt_shape)

    def tensor_items(self, pipeline, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = preprocess_as(served.manifest, PosePreprocess).imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, pipeline.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]

    def oip_extra_parameters(self, response):
        return {"keypoint_names": json.dumps(response.keypoint_names),
                "skeleton": json.dumps([[e.start, e.end] for e in response.skeleton])}


FAMILY = PoseFamily()
