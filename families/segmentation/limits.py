"""Request limits of the segmentation family (serving.yaml `limits.segmentation`, overridable per deployment)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from triserve.families.vision.limits import BoxLimits

MaskFormat = Literal["rle", "polygons", "both"]


class Limits(BoxLimits):
    max_pixels: int = Field(40_000_000, ge=1, description="width*height cap, checked from the header before decoding "
                                                          "(masks are returned in original pixels: this bounds them).")
    max_mask_samples: int = Field(
        16_384, ge=64, le=4_194_304,
        description="Samples one instance's mask is computed on: a box with more pixels is sampled on a coarser grid "
                    "(one sample per span of pixels; 16,384 = 128x128: a 640-pixel box gets one sample per 5x5 "
                    "pixels). Bounds the mask stage at max_detections x this, whatever the boxes' size.")
    max_mask_runs: int = Field(
        50_000, ge=1, description="Run lengths (COCO counts) per image that masks are encoded with, spent in score "
                                   "order: the first instance whose mask would pass it, and every one after it, is "
                                   "returned with its box and mask_skipped. Bounds the mask stage and the response "
                                   "(a mask has a run boundary per pixel column per edge; 100 typical instances on a "
                                   "640x640 image use ~6,000).")
    mask_format: MaskFormat = Field("rle", description="Default mask encoding: COCO RLE, polygons or both.")
    max_polygon_points: int = Field(1000, ge=4, le=100_000,
                                    description="Points per instance over all its polygons (contours are simplified "
                                                "until they fit).")
