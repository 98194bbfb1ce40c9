"""Synthetic scenes of shapes (circles, rectangles, triangles on varied backgrounds): realistic activations for
parity checks (the torch-vs-ONNX Runtime parity of a detector export feeds them, export.parity_images), and the
images of the pipeline's synthetic training set (scripts/detection/dataset.py draws every image with draw_image).

Deterministic in the generator it is given; cv2 and numpy only.
"""
from __future__ import annotations

import cv2
import numpy as np

CLASSES = ("circle", "rectangle", "triangle")


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A varied background: a two-colour gradient, soft blobs, faint lines and pixel noise."""
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    t = np.clip((np.cos(angle) * xx + np.sin(angle) * yy + 1) / 2, 0, 1)[..., None]
    img = (c0 * (1 - t) + c1 * t).astype(np.float32)
    for _ in range(int(rng.integers(0, 5))):  # low-contrast blobs
        centre = rng.uniform(0, size, 2)
        sigma = rng.uniform(0.05, 0.3) * size
        blob = np.exp(-(((xx * size - centre[0]) ** 2 + (yy * size - centre[1]) ** 2) / (2 * sigma**2)))[..., None]
        img += blob * rng.uniform(-60, 60, 3)
    img = np.clip(img, 0, 255).astype(np.uint8)
    for _ in range(int(rng.integers(0, 6))):  # thin distractor lines
        p0, p1 = rng.integers(0, size, 2), rng.integers(0, size, 2)
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        cv2.line(img, (int(p0[0]), int(p0[1])), (int(p1[0]), int(p1[1])), colour, 1, cv2.LINE_AA)
    return img


def _rgb(c: np.ndarray) -> tuple[int, int, int]:
    return int(c[0]), int(c[1]), int(c[2])


def _contrasting_colour(rng: np.random.Generator, local: np.ndarray) -> tuple[int, int, int]:
    best, best_d = None, -1.0
    for _ in range(20):
        c = rng.integers(0, 256, 3)
        d = float(np.linalg.norm(c.astype(np.float64) - local))
        if d > 110:
            return _rgb(c)
        if d > best_d:
            best, best_d = c, d
    assert best is not None  # the first draw is always the best so far (a distance is >= 0)
    return _rgb(best)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / max((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter, 1e-9)


def draw_image(rng: np.random.Generator, size: int,
               max_objects: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """One RGB image and its objects as (class index, [x1, y1, x2, y2] pixel box)."""
    img = _background(rng, size)
    objects: list[tuple[int, np.ndarray]] = []
    n = int(rng.integers(1, max_objects + 1))
    lo, hi = max(8, int(0.09 * size)), max(12, int(0.38 * size))
    for _ in range(n):
        for _attempt in range(30):
            cls = int(rng.integers(0, len(CLASSES)))
            w = int(rng.integers(lo, hi + 1))
            h = w if cls == 0 else int(np.clip(w * rng.uniform(0.6, 1.6), lo, hi))
            x1, y1 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
            box = np.array([x1, y1, x1 + w, y1 + h], np.float64)
            if all(_iou(box, other) < 0.05 for _, other in objects):
                break
        else:
            continue
        local = img[y1:y1 + h, x1:x1 + w].reshape(-1, 3).mean(0)
        colour = _contrasting_colour(rng, local)
        x2, y2 = x1 + w - 1, y1 + h - 1  # inclusive pixel corners: the box [x1, x1 + w) is tight
        if cls == 0:
            r = (w - 1) / 2
            cv2.circle(img, (int(round(x1 + r)), int(round(y1 + r))), int(round(r)), colour, -1, cv2.LINE_AA)
        elif cls == 1:
            cv2.rectangle(img, (x1, y1), (x2, y2), colour, -1, cv2.LINE_AA)
        else:
            apex = x1 + int(rng.integers(0, w))
            pts = [(apex, y1), (x1, y2), (x2, y2)]
            orient = int(rng.integers(0, 4))  # apex up / down / left / right, always touching all four box edges
            if orient == 1:
                pts = [(apex, y2), (x1, y1), (x2, y1)]
            elif orient >= 2:
                apy = y1 + int(rng.integers(0, h))
                pts = [(x1, apy), (x2, y1), (x2, y2)] if orient == 2 else [(x2, apy), (x1, y1), (x1, y2)]
            cv2.fillPoly(img, [np.array(pts, np.int32)], colour, cv2.LINE_AA)
        objects.append((cls, box))
    noise = rng.normal(0, rng.uniform(2, 14), img.shape)
    img = np.clip(img.astype(np.float32) + noise, 0, 255).astype(np.uint8)
    return img, objects
