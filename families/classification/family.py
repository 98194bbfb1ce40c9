"""The image classification family: encoded images -> decoded within the limits -> resized and centre-cropped (or
letterboxed) per served version as uint8 -> normalised by the runner (runtime.py) -> probabilities -> top-k labels."""
from __future__ import annotations

import numpy as np

from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.classification.postprocess import check_scores, probabilities, top_k
from triserve.families.classification.preprocess import crop
from triserve.families.classification.schemas import (
    ClassifiedImage,
    ClassifyImageOptions,
    ClassifyImageRequest,
    ClassifyImageResponse,
    ClassifyImageUpload,
    ClassScore,
)
from triserve.families.vision.family import ImageFamily, image_api
from triserve.families.vision.schemas import label_of
from triserve.kernel.errors import ApiError
from triserve.kernel.tensors import TOP_K_OUTPUTS
from triserve.models.manifest import preprocess_as


class ClassificationFamily(ImageFamily):
    name = "classification"
    api = image_api("/v1/classify-image", "Classify the main object (top-k labels)", upload=ClassifyImageUpload,
                    body=ClassifyImageRequest, options=ClassifyImageOptions, response=ClassifyImageResponse,
                    grpc_method="ClassifyImage", outputs=TOP_K_OUTPUTS,
                    tensor_note="cropped, normalised in the manifest's colour order")

    def validate(self, view, request):
        if request.top_k > view.limits.max_top_k:
            raise ApiError(422, "top_k_too_large", f"top_k {request.top_k} exceeds {view.limits.max_top_k}",
                           {"limit": view.limits.max_top_k})
        return super().validate(view, request)

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
            scores = [ClassScore(class_id=int(j), label=label_of(labels, j), score=round(float(probs[j]), 6))
                      for j in top]
            out.append(ClassifiedImage(width=image.shape[1], height=image.shape[0], label=scores[0].label,
                                       score=scores[0].score, top_k=scores))
        return {"results": out}

    def check_outputs(self, manifest, outputs):
        output = preprocess_as(manifest, ClassificationPreprocess).output
        for row in outputs:
            check_scores(row, len(manifest.labels), output)

    def agreement(self, manifest, served, shadow):
        return float(int(np.argmax(served)) == int(np.argmax(shadow)))


FAMILY = ClassificationFamily()
