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

from triserve.families.detection.importers.scenes import CLASSES, draw_image

SPLITS = ("train", "val", "test")
GENERATOR_VERSION = 2  # bump when the drawing code (families/detection/importers/scenes.py) changes: it is part of
# the cache key
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
