"""The pose family: YOLO pose heads [4 + classes + K * dims, anchors] behind the vision base's letterbox and capped NMS
on the boxes, keypoints mapped back like the boxes, with the model's keypoint names and skeleton."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from triserve.families.pose.manifest import PosePreprocess
from triserve.families.pose.postprocess import check_pose_head, decode_pose, keypoints_to_original, to_keypoints
from triserve.families.pose.schemas import (
    Bone,
    Person,
    PoseImageResult,
    PoseOptions,
    PoseRequest,
    PoseResponse,
    PoseUpload,
)
from triserve.families.vision.family import BoxFamily, ImageOip, image_api
from triserve.families.vision.letterbox import boxes_to_original
from triserve.families.vision.nms import NMSParams, box_agreement, runner_keep
from triserve.families.vision.schemas import box_fields
from triserve.kernel.tensors import TensorMeta
from triserve.models.manifest import preprocess_as


def pose_agreement(served: np.ndarray, shadow: np.ndarray, nc: int, kpt_shape: tuple[int, int],
                   max_px: float = 8.0) -> float:
    """The vision base's box agreement on the instance boxes, times the share of the served instances' keypoints
    that the shadow places within `max_px` network pixels (instances paired by the same NMS order; a changed count
    already lowers the box agreement)."""
    a, b = (decode_pose(x, nc, kpt_shape, NMSParams()) for x in (served, shadow))
    boxes = box_agreement(a.det, b.det)
    n = min(len(a.det.scores), len(b.det.scores))
    if n == 0:
        return boxes
    dist = np.linalg.norm(a.keypoints[:n, :, :2] - b.keypoints[:n, :, :2], axis=-1)
    return boxes * float((dist <= max_px).mean())


def _keypoints_value(response: PoseResponse) -> list[str]:
    return [x.model_dump_json() for x in response.results]


@dataclass(frozen=True)
class PoseOip(ImageOip):
    """Pose on OIP: the model's keypoint names and skeleton travel as response parameters."""

    def extra_parameters(self, response):
        return {"keypoint_names": json.dumps(response.keypoint_names),
                "skeleton": json.dumps([[e.start, e.end] for e in response.skeleton])}


class PoseFamily(BoxFamily):
    name = "pose"
    api = image_api("/v1/pose", "Estimate people's poses (boxes and keypoints)", upload=PoseUpload, body=PoseRequest,
                    options=PoseOptions, response=PoseResponse, grpc_method="Pose",
                    outputs=(TensorMeta("POSES", "BYTES", (-1,), value=_keypoints_value),), oip=PoseOip)

    def keep(self, view, request):
        return runner_keep(self.nms_params(view, request))

    def respond(self, view, request, work, answers):
        """People with boxes and keypoints in the original image's pixels, with the serving version's keypoint
        names and skeleton."""
        [answer] = answers
        labels = answer.result.served.manifest.labels
        pre = preprocess_as(answer.result.served.manifest, PosePreprocess)
        params, visibility = self.nms_params(view, request), view.limits.keypoint_visibility
        out = []
        for poses, meta, candidates in self.kept(view, request, answer,
                                                 lambda raw: decode_pose(raw, len(labels), pre.kpt_shape, params),
                                                 lambda poses: poses.det):
            det = poses.det
            boxes, kpts = boxes_to_original(det.boxes, meta), keypoints_to_original(poses.keypoints, meta)
            out.append(PoseImageResult(width=meta.orig_w, height=meta.orig_h, candidates=candidates, people=[
                Person(**box_fields(b, s, c, labels), keypoints=to_keypoints(k, pre.keypoint_names, visibility))
                for b, s, c, k in zip(boxes, det.scores, det.classes, kpts)]))
        return {"keypoint_names": pre.keypoint_names, "skeleton": [Bone(start=a, end=b) for a, b in pre.skeleton],
                "results": out}

    def check_outputs(self, manifest, outputs):
        kpt_shape = preprocess_as(manifest, PosePreprocess).kpt_shape
        for raw in outputs:
            check_pose_head(raw, len(manifest.labels), kpt_shape)

    def agreement(self, manifest, served, shadow):
        return pose_agreement(served, shadow, len(manifest.labels), preprocess_as(manifest, PosePreprocess).kpt_shape)


FAMILY = PoseFamily()
