"""The pose pipeline: encoded images -> letterbox -> runner -> capped NMS on the boxes -> boxes and keypoints in the
original image's pixels, with the serving version's keypoint names and skeleton."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from configs.deployments import Deployment
from families.detection.decode import decode_images
from families.detection.postprocess import NMSParams, request_nms, runner_keep
from families.detection.preprocess import boxes_to_original, fit
from families.pose.limits import Limits
from families.pose.manifest import PosePreprocess
from families.pose.postprocess import decode_pose, keypoints_to_original
from families.pose.schemas import (
    Bone,
    Keypoint,
    Person,
    PoseImageResult,
    PoseOptions,
    PoseRequest,
    PoseResponse,
    PoseUpload,
)
from kernel.call import CallContext, bind, finish
from kernel.context import ServingContext
from kernel.request_context import StageClock
from kernel.routing.inference import run_task
from kernel.routing.rollout import ServedModel
from kernel.schemas import ModelInfo
from models.manifest import preprocess_as
from observability.metrics import ITEMS, labelled


def to_keypoints(kpts: np.ndarray, names: list[str], visibility: float) -> list[Keypoint]:
    """One person's [K, dims] keypoints (original pixels) -> named keypoints; an invisible one keeps its place and
    its confidence (a client decides what to draw; dropping it would shift every index of the skeleton)."""
    out = []
    for name, row in zip(names, kpts):
        conf = round(float(row[2]), 5) if row.shape[0] > 2 else None
        out.append(Keypoint(name=name, x=round(float(row[0]), 2), y=round(float(row[1]), 2), confidence=conf,
                            visible=conf is None or conf >= visibility))
    return out


@dataclass
class PosePipeline:
    """One pose deployment: its request limits and NMS defaults; preprocessing and the keypoint schema come from the
    manifest of the version that serves."""

    ctx: ServingContext
    deployment: Deployment
    limits: Limits

    def nms_params(self, opts: PoseOptions) -> NMSParams:
        return request_nms(self.limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections)

    async def run(self, request: PoseRequest | PoseUpload, call: CallContext) -> PoseResponse:
        """Base64 images (the JSON route) or encoded bytes (uploads, typed gRPC, OIP) -> people with keypoints."""
        clock = StageClock()
        return await self.estimate(decode_images(request.images, self.limits), request, clock, call)

    async def estimate(self, images: list[np.ndarray], opts: PoseOptions, clock: StageClock,
                       call: CallContext) -> PoseResponse:
        ctx, dep = self.ctx, self.deployment
        ctx.protection.access.capacity(dep.name, dep.family)
        bind(call, dep.name)
        labelled(ITEMS, dep.name).observe(len(images))
        prepared: dict[ServedModel, list] = {}

        def items_for(model: ServedModel) -> list[np.ndarray]:
            pre = preprocess_as(model.manifest, PosePreprocess)
            tensors, metas = zip(*(fit(im, pre.imgsz) for im in images))
            prepared[model] = list(metas)
            return list(tensors)

        params = self.nms_params(opts)
        result = await run_task(ctx, dep, items_for, opts.model, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived, keep=runner_keep(params))
        manifest = result.served.manifest
        labels = manifest.labels
        pre = preprocess_as(manifest, PosePreprocess)
        quality = ctx.quality if opts.conf_threshold is None else None  # the reference uses default thresholds
        out = []
        metas = prepared[result.served]
        for raw, meta, facts in zip(result.outputs, metas, result.facts or [{}] * len(metas)):
            poses = decode_pose(np.asarray(raw), len(labels), pre.kpt_shape, params)
            det = poses.det
            if quality is not None:
                quality.observe(result.model, "confidence", det.scores)
                quality.observe(result.model, "boxes_per_image", [len(det.scores)])
            boxes = boxes_to_original(det.boxes, meta)
            kpts = keypoints_to_original(poses.keypoints, meta)
            out.append(PoseImageResult(width=meta.orig_w, height=meta.orig_h,
                                       candidates=facts.get("candidates", det.candidates), people=[
                Person(box=[round(float(v), 2) for v in b], score=round(float(s), 5), class_id=int(c),
                       label=labels[int(c)] if int(c) < len(labels) else str(int(c)),
                       keypoints=to_keypoints(k, pre.keypoint_names, self.limits.keypoint_visibility))
                for b, s, c, k in zip(boxes, det.scores, det.classes, kpts)]))
        clock.stage("postprocess")
        return finish(dep.name, PoseResponse(
            request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=result.model, version=result.version),
            degraded=result.degraded, degraded_reason=result.degraded_reason, timings=clock.timings(result.infer_ms),
            keypoint_names=pre.keypoint_names, skeleton=[Bone(start=a, end=b) for a, b in pre.skeleton],
            results=out), call, result.batch)
