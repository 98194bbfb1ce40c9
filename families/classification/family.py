"""The image classification family: encoded images -> decoded within the limits -> resized and centre-cropped (or
letterboxed) per served version as uint8 -> normalised by the runner (runtime.py) -> probabilities -> top-k labels."""
from __future__ import annotations

import numpy as np

from families.classification.manifest import ClassificationPreprocess
from families.classification.postprocess import check_scores, probabilities, top_k
from families.classification.preprocess import crop
from families.classification.schemas import (
    ClassifiedImage,
    ClassifyImageOptions,
    ClassifyImageRequest,
    ClassifyImageResponse,
    ClassifyImageUpload,
    ClassScore,
)
from families.detection.decode import decode_images
from kernel.errors import ApiError
from kernel.family import Family, RestRoute
from kernel.tensors import TensorMeta, bad_request, check_batch, check_finite
from models.manifest import preprocess_as


class ClassificationFamily(Family):
    name = "classification"
    request_model = ClassifyImageUpload
    response_model = ClassifyImageResponse
    routes = (RestRoute("/v1/classify-image", "application/json", ClassifyImageRequest,
                        "Classify base64-encoded images (top-k labels per image)"),
              RestRoute("/v1/classify-image/upload", "multipart/form-data", ClassifyImageOptions,
                        "Classify uploaded image files (multipart/form-data, field 'images')",
                        files="images", files_description="One or more image files."))
    oip_alias = "classify-image"
    oip_pipeline_inputs = (TensorMeta("IMAGE", "BYTES", (-1,), field="images", binary=True),)
    oip_pipeline_outputs = (
        TensorMeta("LABEL", "BYTES", (-1,), value=lambda r: [x.label for x in r.results]),
        TensorMeta("SCORE", "FP32", (-1,), value=lambda r: [x.score for x in r.results]),
        TensorMeta("TOP_K_LABELS", "BYTES", (-1, -1), value=lambda r: [[t.label for t in x.top_k] for x in r.results]),
        TensorMeta("TOP_K_SCORES", "FP32", (-1, -1), value=lambda r: [[t.score for t in x.top_k] for x in r.results]))
    oip_parameters = ("top_k", "model")
    grpc_method = "ClassifyImage"

    def validate(self, view, request):
        if request.top_k > view.limits.max_top_k:
            raise ApiError(422, "top_k_too_large", f"top_k {request.top_k} exceeds {view.limits.max_top_k}",
                           {"limit": view.limits.max_top_k})
        return decode_images(request.images, view.limits)

    def items(self, view, work, model):
        # compact uint8 crops across the hop; the runner normalises them with this version's mean/std
        pre = preprocess_as(model.manifest, ClassificationPreprocess)
        return [crop(im, pre, i, view.limits.max_pixels) for i, im in enumerate(work)], None

    def respond(self, view, request, work, answers):
        [answer] = answers
        result = answer.result
        manifest = result.served.manifest
        labels, output = manifest.labels, preprocess_as(manifest, ClassificationPreprocess).output
        out = []
        for image, row in zip(work, result.outputs):
            probs = probabilities(row, output)
            top = top_k(probs, request.top_k)
            view.observe(result.model, "top1_prob", [float(probs[top[0]])])
            view.observe(result.model, "class_freq", [int(top[0])])
            scores = [ClassScore(class_id=int(j), label=labels[j] if j < len(labels) else str(int(j)),
                                 score=round(float(probs[j]), 6)) for j in top]
            out.append(ClassifiedImage(width=image.shape[1], height=image.shape[0], label=scores[0].label,
                                       score=scores[0].score, top_k=scores))
        return {"results": out}

    def check_outputs(self, manifest, outputs):
        output = preprocess_as(manifest, ClassificationPreprocess).output
        for row in outputs:
            check_scores(row, len(manifest.labels), output)

    def agreement(self, manifest, served, shadow):
        return float(int(np.argmax(served)) == int(np.argmax(shadow)))

    def tensor_items(self, view, served, arrays, batch_cap):
        spec = served.manifest.inputs[0]
        arr = arrays[spec.name]
        pre = preprocess_as(served.manifest, ClassificationPreprocess)
        size = pre.imgsz
        if arr.ndim != 4 or tuple(arr.shape[1:]) != (3, size, size):
            raise bad_request("shape_mismatch", f"input {spec.name!r} must be [n, 3, {size}, {size}] (cropped, "
                              f"normalised {pre.color_order}), got {list(arr.shape)}",
                              {"expected": list(spec.shape), "received": list(arr.shape)})
        check_batch(arr.shape[0], min(batch_cap, view.limits.max_images), spec.name)
        check_finite(arr, spec.name)
        return [np.ascontiguousarray(x, dtype=np.float32) for x in arr]


FAMILY = ClassificationFamily()
