"""The segmentation family: ultralytics segment heads (boxes, classes, mask coefficients + prototypes, packed into one
row by the importer) behind the vision base's letterbox and capped NMS; masks as COCO RLE and/or polygons."""
from __future__ import annotations

import numpy as np

from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.families.segmentation.postprocess import check_row, image_result, split_row
from triserve.families.segmentation.schemas import SegmentOptions, SegmentRequest, SegmentResponse, SegmentUpload
from triserve.families.vision.family import BoxFamily, image_api
from triserve.families.vision.nms import NMSParams, box_agreement, nms
from triserve.kernel.tensors import TensorMeta
from triserve.models.manifest import preprocess_as


class SegmentationFamily(BoxFamily):
    name = "segmentation"
    api = image_api("/v1/segment", "Segment object instances (masks as COCO RLE or polygons)", upload=SegmentUpload,
                    body=SegmentRequest, options=SegmentOptions, response=SegmentResponse, grpc_method="Segment",
                    outputs=(TensorMeta("INSTANCES", "BYTES", (-1,), value=lambda r: [
                        x.model_dump_json(exclude_none=True) for x in r.results]),))

    def respond(self, view, request, work, answers):
        """Masks of the kept instances in original pixels (COCO RLE and/or polygons)."""
        [answer] = answers
        lim, manifest = view.limits, answer.result.served.manifest
        params, fmt = self.nms_params(view, request), request.mask_format or lim.mask_format
        pre = preprocess_as(manifest, SegmentationPreprocess)
        return {"results": [image_result(np.asarray(raw), meta, pre, manifest.labels, params, fmt,
                                         lim.max_polygon_points, lim.max_mask_runs, lim.max_mask_samples)
                            for raw, meta in zip(answer.result.outputs, answer.state)]}

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_row(raw, manifest.preprocess, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        """Box agreement of the two heads (the vision base's): masks follow from the same kept anchors."""
        nc = len(manifest.labels)
        a, b = (nms(np.ascontiguousarray(split_row(x, manifest.preprocess, nc)[0][:4 + nc]), NMSParams())
                for x in (served, shadow))
        return box_agreement(a, b)


FAMILY = SegmentationFamily()
