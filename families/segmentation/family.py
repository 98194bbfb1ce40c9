"""The segmentation family: ultralytics segment heads (boxes, classes, mask coefficients + prototypes, packed into one
row by the importer) behind detection's letterbox and capped NMS; masks as COCO RLE and/or polygons."""
from __future__ import annotations

import numpy as np

from families.detection.decode import decode_images
from families.detection.family import box_agreement
from families.detection.postprocess import NMSParams, request_nms
from families.detection.preprocess import fit
from families.segmentation.limits import Limits
from families.segmentation.manifest import SegmentationPreprocess
from families.segmentation.postprocess import check_row, image_result, split_row
from families.segmentation.schemas import SegmentOptions, SegmentRequest, SegmentResponse, SegmentUpload
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite
from models.manifest import preprocess_as


def request_params(limits: Limits, opts: SegmentOptions) -> NMSParams:
    """A request's NMS settings within its deployment's limits (detection's rule, with this family's limits)."""
    return request_nms(limits, opts.conf_threshold, opts.iou_threshold, opts.max_detections, opts.class_aware)


class SegmentationFamily(Family):
    name = "segmentation"
    request_model = SegmentUpload
    response_model = SegmentResponse
    routes = (RestRoute("/v1/segment", "application/json", SegmentRequest,
                        "Segment object instances in base64-encoded images (masks as COCO RLE or polygons)"),
              RestRoute("/v1/segment/upload", "multipart/form-data", SegmentOptions,
                        "Segment object instances in uploaded image files (multipart/form-data, field 'images')",
                        files="images", files_description="One or more image files."))
    oip_alias = "segment"
    oip_pipeline_inputs = (TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True),)
    oip_pipeline_outputs = (TensorMeta("INSTANCES", "BYTES", (-1,),
                                       value=lambda r: [x.model_dump_json(exclude_none=True) for x in r.results]),)
    oip_parameters = ("conf_threshold", "iou_threshold", "max_detections", "class_aware", "mask_format", "model")
    grpc_method = "Segment"

    def validate(self, view, request):
        return decode_images(request.images, view.limits)  # every cap, before the runner

    def items(self, view, work, model):
        boxed, metas = zip(*(fit(im, preprocess_as(model.manifest, SegmentationPreprocess).imgsz) for im in work))
        return list(boxed), list(metas)

    def respond(self, view, request, work, answers):
        """Masks of the kept instances in original pixels (COCO RLE and/or polygons)."""
        [answer] = answers
        lim, manifest = view.limits, answer.result.served.manifest
        params, fmt = request_params(lim, request), request.mask_format or lim.mask_format
        pre = preprocess_as(manifest, SegmentationPreprocess)
        return {"results": [image_result(np.asarray(raw), meta, pre, manifest.labels, params, fmt,
                                         lim.max_polygon_points, lim.max_mask_runs, lim.max_mask_samples)
                            for raw, meta in zip(answer.result.outputs, answer.state)]}

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_row(raw, manifest.preprocess, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        """Box agreement of the two heads (detection's): masks follow from the same kept anchors."""
        nc = len(manifest.labels)
        a, _ = split_row(served, manifest.preprocess, nc)
        b, _ = split_row(shadow, manifest.preprocess, nc)
        return box_agreement(np.ascontiguousarray(a[:4 + nc]), np.ascontiguousarray(b[:4 + nc]))

    def tensor_items(self, view, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = served.manifest.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, view.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


FAMILY = SegmentationFamily()
