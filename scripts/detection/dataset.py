"""Synthetic shapes dataset for the default detector: deterministic, generated on the spot, YOLO-format on disk.

Why synthetic: no COCO weights or images are reachable offline, and a generated set lets the build own its data
version (the fingerprint in the manifest is a hash of every image and label file). Every image is drawn from its own
generator seeded by (seed, split, index), so one image never depends on how many came before it.

Layout written under `root` (the builder keys `root` by a hash of the generation parameters and caches it):

    images/{train,val,test}/000000.png   RGB content saved by OpenCV (BGR on disk, as every image file)
    labels/{train,val,test}/000000.txt   "cls cx cy w h" normalised, one object per line
    data.yaml                            the ultralytics dataset file (absolute path, split dirs, class names)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import yaml

CLASSES = ("circle", "rectangle", "triangle")
SPLITS = ("train", "val", "test")
GENERATOR_VERSION = 2  # bump when the drawing code changes: it is part of the cache key
_COMPLETE = "COMPLETE.json"


@dataclass(frozen=True)
class ShapesSpec:
    """Generation parameters (all of them are part of the dataset cache key)."""

    seed: int
    n_train: int
    n_val: int
    n_test: int
    image_size: int = 320
    max_objects: int = 6

    def counts(self) -> dict[str, int]:
        return {"train": self.n_train, "val": self.n_val, "test": self.n_test}

    def key(self) -> dict:
        return {"generator": GENERATOR_VERSION, "classes": list(CLASSES), **self.__dict__}


@dataclass(frozen=True)
class ShapesDataset:
    root: Path
    spec: ShapesSpec

    @property
    def data_yaml(self) -> Path:
        return self.root / "data.yaml"

    def images(self, split: str) -> list[Path]:
        return sorted((self.root / "images" / split).glob("*.png"))

    def label_path(self, image: Path) -> Path:
        return self.root / "labels" / image.parent.name / (image.stem + ".txt")

    def files(self) -> list[Path]:
        """Every image and label file in a fixed order (what the data fingerprint hashes)."""
        out = []
        for split in SPLITS:
            for img in self.images(split):
                out += [img, self.label_path(img)]
        return out


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


def _write_split(root: Path, spec: ShapesSpec, split: str, progress) -> None:
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    (root / "labels" / split).mkdir(parents=True, exist_ok=True)
    split_id = SPLITS.index(split)
    size = spec.image_size
    for i in range(spec.counts()[split]):
        rng = np.random.default_rng([spec.seed, split_id, i])
        img, objects = draw_image(rng, size, spec.max_objects)
        cv2.imwrite(str(root / "images" / split / f"{i:06d}.png"), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        lines = []
        for cls, (x1, y1, x2, y2) in objects:
            lines.append(f"{cls} {(x1 + x2) / 2 / size:.6f} {(y1 + y2) / 2 / size:.6f} "
                         f"{(x2 - x1) / size:.6f} {(y2 - y1) / size:.6f}")
        (root / "labels" / split / f"{i:06d}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))
        progress.update(1)


def generate(root: Path, spec: ShapesSpec, show_progress: bool = True) -> ShapesDataset:
    """Generate the dataset into `root` unless a complete copy with the same spec is already there."""
    from tqdm import tqdm

    root = Path(root)
    marker = root / _COMPLETE
    if marker.is_file() and json.loads(marker.read_text()) == spec.key():
        return ShapesDataset(root, spec)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".shapes-", dir=root.parent))
    try:
        total = sum(spec.counts().values())
        with tqdm(total=total, desc="shapes dataset", unit="img", disable=not show_progress) as bar:
            for split in SPLITS:
                _write_split(tmp, spec, split, bar)
        data = {"path": str(root.resolve()), "train": "images/train", "val": "images/val", "test": "images/test",
                "names": dict(enumerate(CLASSES))}
        (tmp / "data.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        (tmp / _COMPLETE).write_text(json.dumps(spec.key(), sort_keys=True))
        if root.exists():
            shutil.rmtree(root)
        os.rename(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return ShapesDataset(root, spec)
