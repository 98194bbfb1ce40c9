"""A detector run through the family's own serving path, for the importers' checks: letterbox (preprocess_image)
-> ONNX Runtime -> capped NMS (nms), or for an end-to-end head the confidence filter and cap (postprocess.decode with
the manifest's preprocess.head) -> boxes_to_original. The serving code itself, never re-implemented here: what the
checks measure is what serves."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.vision.letterbox import LetterboxMeta, boxes_to_original, preprocess_image
from triserve.families.vision.nms import NMSParams, decode, nms
from triserve.models.importing.agreement import Dets
from triserve.models.importing.photos import PhotoSet, read_rgb
from triserve.models.importing.result import GateFailed


def nms_params(conf: float = 0.25, iou: float = 0.45, max_det: int = 300, topk: int = 30000) -> NMSParams:
    return NMSParams(conf_threshold=conf, iou_threshold=iou, pre_nms_topk=topk, max_detections=max_det)


def letterboxed(images: Sequence[np.ndarray], pre) -> tuple[np.ndarray, list]:
    """HxWx3 uint8 RGB images -> ([n, 3, S, S] float32 network inputs, letterbox metas) with the manifest's settings."""
    tensors, metas = [], []
    for img in images:
        x, meta = preprocess_image(img, pre.imgsz, pre.pad_value, pre.scale, pre.color_order)
        tensors.append(x)
        metas.append(meta)
    return np.stack(tensors), metas


def head_rows(session, images: Sequence[np.ndarray], pre, batch: int = 1) -> Iterator[tuple[np.ndarray, LetterboxMeta]]:
    """Each image's raw output row with its letterbox, the graph run on `batch` letterboxed images per session call
    (1 for a fixed-batch graph): what the detection and pose checks decode."""
    name = session.get_inputs()[0].name
    for start in range(0, len(images), batch):
        x, metas = letterboxed(images[start:start + batch], pre)
        yield from zip(session.run(None, {name: x})[0], metas)


def run_detector(session, images: Sequence[np.ndarray], pre, params: NMSParams, batch: int = 1) -> list[Dets]:
    """triserve's pipeline on each image; `batch` images per session call (1 for a fixed-batch graph). The head
    format is the manifest's (`pre.head`): capped NMS for anchors heads, the confidence filter and cap for
    end-to-end heads."""
    head = getattr(pre, "head", "anchors")
    out: list[Dets] = []
    for row, meta in head_rows(session, images, pre, batch):
        det = nms(row, params) if head == "anchors" else decode(row, head, params)
        out.append(Dets(boxes_to_original(det.boxes, meta), det.scores.astype(np.float32),
                        det.classes.astype(np.int64)))
    return out


@dataclass
class Photos:
    """Decoded photos, by role."""

    agreement: list[np.ndarray]
    agreement_names: list[str]
    calibration: list[np.ndarray]
    verify: list[Path]  # the agreement photos (ultralytics' bus.jpg and zidane.jpg first, when present)


def decode_photos(photos: PhotoSet) -> Photos:
    """The photos decoded once, by role; calibration ones mirrored when they are also judged on."""
    if not photos.agreement:
        raise GateFailed("no agreement photos: need ultralytics' assets, the photo wheels or --images DIR")
    agree = [read_rgb(p.path) for p in photos.agreement]
    cal = [read_rgb(p.path) for p in photos.calibration]
    if photos.overlap:  # calibrating on the judged photos: at least not on the same pixels
        cal = [np.ascontiguousarray(img[:, ::-1]) for img in cal]
    return Photos(agree, [p.name for p in photos.agreement], cal, [p.path for p in photos.agreement])
