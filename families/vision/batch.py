"""What the image families' offline adapters (kernel/batch.py's contract) share: each record's encoded image decoded
with the deployment's byte and pixel caps, as the service decodes it (a corrupt, empty or oversized image is an error
row with the service's code, never a stopped job), then made into the family's runner item; and for the box families
the letterbox, the NMS settings and the box columns."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.vision.decode import decode_image
from triserve.families.vision.letterbox import LetterboxMeta, boxes_to_original, letterbox
from triserve.families.vision.limits import BoxLimits, ImageLimits
from triserve.families.vision.manifest import LetterboxPreprocess
from triserve.families.vision.nms import Detections, request_nms
from triserve.families.vision.schemas import box_fields
from triserve.kernel.batch import Option, Prepared
from triserve.kernel.errors import ApiError
from triserve.models.manifest import Manifest, preprocess_as


class ImageAdapter:
    """`prepare` for a family whose records are images (SOURCE "images"); a subclass says how one decoded image
    becomes its runner item and the state `finish` reads back (`item`)."""

    SOURCE = "images"
    HEAVY_FINISH = False
    limits: ImageLimits

    def item(self, image: np.ndarray, index: int) -> tuple[np.ndarray, Any]:
        """One decoded HxWx3 RGB image -> (its runner item, its state); an ApiError refuses the record."""
        raise NotImplementedError

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        lim = self.limits
        for i, record in enumerate(records):
            if record.get("read_error"):
                out.errors[i] = ("unreadable_input", str(record["read_error"]))
                continue
            try:
                item, state = self.item(decode_image(bytes(record["data"]), i, lim.max_image_bytes, lim.max_pixels),
                                        i)
            except ApiError as exc:
                out.errors[i] = (exc.code, exc.message)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever else a decoder raises (a PIL plugin patched in by a
                # library of the same process) is this image's error row: one bad image never stops a job
                out.errors[i] = ("invalid_image", f"could not be decoded: {type(exc).__name__}: {exc}")
                continue
            out.items.append(item)
            out.owners.append(i)
            out.states[i] = state
        return out


BOX_COLUMNS = {"width": "i64", "height": "i64", "candidates": "i64", "boxes": "list<list<f64>>",
               "scores": "list<f64>", "class_ids": "list<i64>", "labels": "list<str>"}


class BoxAdapter(ImageAdapter):
    """What the box families' adapters (detection, pose, segmentation) share: the letterboxed image as the runner
    item, the deployment's NMS settings (or the job's), and the boxes in the image's own pixels as columns; a
    subclass names its manifest's preprocess (`PREPROCESS`) and turns one image's head into its row (`row`)."""

    PREPROCESS: type[LetterboxPreprocess]
    OPTIONS = (Option("conf_threshold", "score threshold (default: the deployment's)", float),
               Option("iou_threshold", "NMS IoU threshold (default: the deployment's)", float),
               Option("max_detections", "boxes kept per image (default: the deployment's)", int))
    COLUMNS = BOX_COLUMNS
    limits: BoxLimits

    def __init__(self, directory: Path, manifest: Manifest, limits: BoxLimits, options: dict[str, Any]):
        self.pre = preprocess_as(manifest, self.PREPROCESS)
        self.labels = manifest.labels
        self.limits = limits
        conf, iou, most = (options.get(k) for k in ("conf_threshold", "iou_threshold", "max_detections"))
        self.params = request_nms(limits, None if conf is None else float(conf), None if iou is None else float(iou),
                                  int(most) if most else None)

    def item(self, image, index):
        return letterbox(image, self.pre.imgsz, self.pre.pad_value)

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        return prepared.rows(outputs, self.COLUMNS, self.row)

    def row(self, outs: list[np.ndarray], meta: LetterboxMeta) -> dict[str, Any]:
        """One image's outputs -> its row (the family's COLUMNS)."""
        raise NotImplementedError

    def box_columns(self, det: Detections, meta: LetterboxMeta, candidates: int | None = None) -> dict[str, Any]:
        """The kept boxes in the original image's pixels, as the service answers them."""
        boxes = [box_fields(b, s, c, self.labels) for b, s, c in
                 zip(boxes_to_original(det.boxes, meta), det.scores, det.classes)]
        return {"width": meta.orig_w, "height": meta.orig_h,
                "candidates": det.candidates if candidates is None else candidates,
                "boxes": [b["box"] for b in boxes], "scores": [b["score"] for b in boxes],
                "class_ids": [b["class_id"] for b in boxes], "labels": [b["label"] for b in boxes]}
