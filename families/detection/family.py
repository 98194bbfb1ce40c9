"""The detection family: YOLO-style heads [4 + classes, anchors] (or end-to-end [max_det, 6]) behind the vision base's
letterbox and capped NMS.

Its hooks: encoded images (base64 or bytes) -> decoded within the limits -> fitted per served version (the runner
pads and tensorises) -> capped NMS on what the runner kept of each head -> boxes in the original image's pixels."""
from __future__ import annotations

from triserve.families.detection.manifest import DetectionPreprocess
from triserve.families.detection.schemas import (
    Detection,
    DetectOptions,
    DetectRequest,
    DetectResponse,
    DetectUpload,
    ImageResult,
)
from triserve.families.vision.family import BoxFamily, image_api
from triserve.families.vision.letterbox import boxes_to_original
from triserve.families.vision.nms import NMSParams, box_agreement, check_head, decode, runner_keep
from triserve.families.vision.schemas import box_fields
from triserve.kernel.tensors import TensorMeta
from triserve.models.manifest import preprocess_as


class DetectionFamily(BoxFamily):
    name = "detection"
    api = image_api("/v1/detect", "Detect objects", upload=DetectUpload, body=DetectRequest, options=DetectOptions,
                    response=DetectResponse, grpc_method="Detect",
                    outputs=(TensorMeta("DETECTIONS", "BYTES", (-1,),
                                        value=lambda r: [x.model_dump_json() for x in r.results]),))

    def keep(self, view, request):
        return runner_keep(self.nms_params(view, request))

    def respond(self, view, request, work, answers):
        [answer] = answers
        manifest = answer.result.served.manifest
        params, head = self.nms_params(view, request), preprocess_as(manifest, DetectionPreprocess).head
        return {"results": [
            ImageResult(width=meta.orig_w, height=meta.orig_h, candidates=candidates, detections=[
                Detection(**box_fields(b, s, c, manifest.labels))
                for b, s, c in zip(boxes_to_original(det.boxes, meta), det.scores, det.classes)])
            for det, meta, candidates in self.kept(view, request, answer, lambda raw: decode(raw, head, params),
                                                   lambda det: det)]}

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_head(raw, len(manifest.labels), manifest.preprocess.head)

    def agreement(self, manifest, served, shadow):
        head = manifest.preprocess.head
        return box_agreement(decode(served, head, NMSParams()), decode(shadow, head, NMSParams()))


FAMILY = DetectionFamily()
