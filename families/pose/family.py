"""The pose family: YOLO pose heads [4 + classes + K * dims, anchors] behind letterbox, capped NMS on the boxes (the
detection family's), keypoints mapped back like the boxes, with the model's keypoint names and skeleton."""
from __future__ import annotations

import json

import numpy as np

from families.detection.decode import decode_images
from families.detection.family import box_agreement
from families.detection.postprocess import NMSParams, request_nms, runner_keep
from families.detection.preprocess import boxes_to_original, fit
from families.pose.manifest import PosePreprocess
from families.pose.postprocess import check_pose_head, decode_pose, keypoints_to_original, to_keypoints
from families.pose.schemas import Bone, Person, PoseImageResult, PoseOptions, PoseRequest, PoseResponse, PoseUpload
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


def nms_params(limits, opts: PoseOptions) -> NMSParams:
    """A request's NMS settings on the boxes within its deployment's limits (detection's rule)."""
    return request_nms(limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections)


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

    def validate(self, view, request):
        return decode_images(request.images, view.limits)

    def items(self, view, work, model):
        tensors, metas = zip(*(fit(im, preprocess_as(model.manifest, PosePreprocess).imgsz) for im in work))
        return list(tensors), list(metas)

    def keep(self, view, request):
        return runner_keep(nms_params(view.limits, request))

    def respond(self, view, request, work, answers):
        """People with boxes and keypoints in the original image's pixels, with the serving version's keypoint
        names and skeleton."""
        [answer] = answers
        result, metas = answer.result, answer.state
        labels = result.served.manifest.labels
        pre = preprocess_as(result.served.manifest, PosePreprocess)
        params = nms_params(view.limits, request)
        observe = request.conf_threshold is None  # the drift reference uses the default thresholds
        out = []
        for raw, meta, facts in zip(result.outputs, metas, result.facts or [{}] * len(metas)):
            poses = decode_pose(np.asarray(raw), len(labels), pre.kpt_shape, params)
            det = poses.det
            if observe:
                view.observe(result.model, "confidence", det.scores)
                view.observe(result.model, "boxes_per_image", [len(det.scores)])
            boxes, kpts = boxes_to_original(det.boxes, meta), keypoints_to_original(poses.keypoints, meta)
            out.append(PoseImageResult(width=meta.orig_w, height=meta.orig_h,
                                       candidates=facts.get("candidates", det.candidates), people=[
                Person(box=[round(float(v), 2) for v in b], score=round(float(s), 5), class_id=int(c),
                       label=labels[int(c)] if int(c) < len(labels) else str(int(c)),
                       keypoints=to_keypoints(k, pre.keypoint_names, view.limits.keypoint_visibility))
                for b, s, c, k in zip(boxes, det.scores, det.classes, kpts)]))
        return {"keypoint_names": pre.keypoint_names, "skeleton": [Bone(start=a, end=b) for a, b in pre.skeleton],
                "results": out}

    def check_outputs(self, manifest, outputs):
        kpt_shape = preprocess_as(manifest, PosePreprocess).kpt_shape
        for raw in outputs:
            check_pose_head(raw, len(manifest.labels), kpt_shape)

    def agreement(self, manifest, served, shadow):
        return pose_agreement(served, shadow, len(manifest.labels), preprocess_as(manifest, PosePreprocess).kpt_shape)

    def tensor_items(self, view, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = preprocess_as(served.manifest, PosePreprocess).imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, view.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]

    def oip_extra_parameters(self, response):
        return {"keypoint_names": json.dumps(response.keypoint_names),
                "skeleton": json.dumps([[e.start, e.end] for e in response.skeleton])}


FAMILY = PoseFamily()
