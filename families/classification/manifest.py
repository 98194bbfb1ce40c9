"""What the image classification family records in a model's manifest: how the model was trained to see an image
(models/manifest.py assembles every family's record into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from triserve.families.vision.manifest import ImagePreprocess


class ClassificationPreprocess(ImagePreprocess):
    """Resize, crop, normalisation and output kind (families/classification/preprocess.py and runtime.py implement
    them). A pixel reaches the network as (value * scale - mean[c]) / std[c], in `color_order`."""

    kind: Literal["classification"] = "classification"
    resize: Literal["center_crop", "letterbox"] = Field(
        "center_crop", description="'center_crop': the short side resized to `resize_size`, then the centre "
                                   "imgsz square cut out (torchvision Resize(int) + CenterCrop; ultralytics' and "
                                   "ImageNet's evaluation transform); 'letterbox': the whole image fitted into the "
                                   "square, aspect kept, padded with `pad_value`.")
    resize_size: int | None = Field(None, gt=0, description="Short side before the centre crop (default: imgsz).")
    interpolation: Literal["bilinear", "bicubic"] = Field("bilinear", description="PIL resampling filter.")
    mean: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="Per-channel mean, in colour order.")
    std: tuple[float, float, float] = Field((1.0, 1.0, 1.0), description="Per-channel std (> 0), in colour order.")
    output: Literal["probabilities", "logits"] = Field(
        "probabilities", description="What the graph outputs per image: softmax probabilities, or logits that the "
                                     "service turns into probabilities (softmax).")

    @model_validator(mode="after")
    def _consistent(self) -> ClassificationPreprocess:
        if min(self.std) <= 0:
            raise ValueError(f"std must be > 0 per channel, got {self.std}")
        if self.resize == "center_crop" and self.crop_from < self.imgsz:
            raise ValueError(f"resize_size {self.resize_size} is smaller than the {self.imgsz} crop")
        return self

    @property
    def crop_from(self) -> int:
        return self.resize_size or self.imgsz


Preprocess = ClassificationPreprocess
