"""The segmentation family: ultralytics segment heads (boxes, classes, mask coefficients + prototypes, packed into one
row by the importer) behind detection's letterbox and capped NMS; masks as COCO RLE and/or polygons."""
from __future__ import annotations

import numpy as np

from families.detection.family import box_agreement
from families.segmentation.postprocess import check_row, split_row
from families.segmentation.schemas import SegmentOptions, SegmentRequest, SegmentResponse, SegmentUpload
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite


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

    def pipeline(self, ctx, deployment):
        from families.segmentation.pipeline import SegmentationPipeline

        return SegmentationPipeline(ctx, deployment, ctx.limits(deployment))

    def check_outputs(self, manifest, outputs):
        for raw in outputs:
            check_row(raw, manifest.preprocess, len(manifest.labels))

    def agreement(self, manifest, served, shadow):
        """Box agreement of the two heads (detection's): masks follow from the same kept anchors."""
        nc = len(manifest.labels)
        a, _ = split_row(served, manifest.preprocess, nc)
        b, _ = split_row(shadow, manifest.preprocess, nc)
        return box_agreement(np.ascontiguousarray(a[:4 + nc]), np.ascontiguousarray(b[:4 + nc]))

    def tensor_items(self, pipeline, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        size = served.manifest.preprocess.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (letterboxed "
                              f"RGB scaled to [0, 1]), got {list(arr.shape)}", {"expected": list(spec.shape),
                                                                                "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, pipeline.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


FAMILY = SegmentationFamily()
