"""Import an ultralytics .pt checkpoint as a detector: read, decided, exported, proved, verified, published.

    triserve import detection-pt --weights best.pt --name my-det --version 1.0.0 \\
        [--head auto|anchors|end2end] [--imgsz N] [--images DIR] [--data data.yaml] [--alias canary] [--no-verify] \\
        [--license SPDX]                             # required when the checkpoint states no licence
        [--custom-modules [PICKLED_NAME=]MODULE_OR_FILE ...]  # the training code's own layers (repeatable)

SECURITY: a .pt checkpoint is a pickle, and loading a pickle runs code; a --custom-modules file or module is code
too. Both run with your rights during the import (never at serving time: the published model is an ONNX graph).
Import only checkpoints and custom modules from sources you trust.

Steps (nothing is published unless all pass; a refusal says why):
  0. custom layers: a checkpoint whose training script defined its own layers pickles them as `__main__.<Class>`
     (or under the training project's module, `mytrain.layers.<Class>`). The classes the pickle needs are listed
     first (pickletools: nothing is unpickled) and a missing one is refused by name, with the flag that supplies it:
     --custom-modules layers.py (or an importable module) puts the file's public classes and functions in
     `__main__`; --custom-modules mytrain.layers=layers.py also registers it under the name the pickle recorded.
     They stay loaded for the whole import (read, export, ultralytics' predictor) and are removed afterwards
     (models/importing/custom_modules.py); the manifest records each file's sha256. A C2f subclass must override
     forward_split as well as forward: ultralytics' ONNX exporter runs every C2f through forward_split, so a change
     made in forward alone is not exported (the parity gate below then refuses the import).
  1. read: the checkpoint is loaded as ultralytics loads it and re-saved into the work dir with plain-dict training
     args (old 8.0.x checkpoints pickle them as omegaconf DictConfig; when omegaconf is not installed a stand-in
     reads them: only that container, the weights are ultralytics' own classes). Task and head decide:
       detect     YOLOv3u/v5u/v8/v9/v11/v12 heads -> anchors head [b, 4 + nc, anchors], the service's capped NMS;
                  YOLOv10 / YOLO26 heads (a one-to-one branch) -> the NMS-free end-to-end head [b, max_det, 6]
                  (x1, y1, x2, y2, score, class; manifest preprocess.head 'end2end'), or with --head anchors their
                  one-to-many branch as an anchors head
       segment    SERVED AS DETECTION: the head is cut down to its Detect part (box and class branches, the same
       pose       weights; the mask-coefficient / keypoint branch and the mask prototypes are dropped before export,
                  so they cost nothing at serving time). The boxes and classes are exactly what ultralytics'
                  segmentation / pose predictor reports (verified below against the ORIGINAL checkpoint); masks and
                  keypoints are not served (the manifest says so).
       obb        REFUSED: an oriented box (cx, cy, w, h, angle) is not an axis-aligned box. Its enclosing box
                  would be served, and the family's axis-aligned NMS would suppress neighbouring rotated objects
                  (ships in a harbour, cars in a car park seen from above) whose enclosing boxes overlap while the
                  rotated boxes do not: other boxes than ultralytics' rotated NMS keeps.
       classify   REFUSED: one class distribution per image, no boxes (`triserve import classification-pt`);
       semantic, depth: refused (no boxes); RT-DETR (RTDETRDecoder: [b, queries, 4 + nc] normalised
                  cxcywh with its own query selection), YOLO-World / YOLOE (open vocabulary: classes from text
                  embeddings): refused, other heads than this family decodes.
  2. export + parity (export.py export_user_model): ONNX with dynamic batch/size, torch vs ONNX
     Runtime on batches 1/4/32 and several sizes; an end-to-end graph's rows are also proved independent of the batch
     (else it is re-exported and served with a fixed batch of 1).
  3. verification against ultralytics (verify.py): `YOLO(checkpoint).predict` (nms=False for end-to-end heads:
     its one-to-one branch) vs triserve's letterbox -> ONNX Runtime -> decode on real photos (the package photos of
     models/importing/photos.py, or --images): every box matched by class with IoU >= 0.9 and a score within 0.02.
  4. publish (immutable name:version), optional alias.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import re
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from families.detection.importers.evaluate import detection_references
from families.detection.importers.export import class_names, end2end_capable, export_user_model
from families.detection.importers.onnx_graph import PARAMS, ImportParams
from families.detection.importers.pipeline import nms_params, run_detector
from families.detection.importers.ultralytics_env import setup_ultralytics
from families.detection.importers.verify import verify_against_ultralytics
from families.detection.manifest import DetectionPreprocess
from models.importing import custom_modules as custom_code
from models.importing.graphs import ort_session
from models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from models.importing.photos import package_photos, read_rgb, user_photos
from models.importing.provenance import package_versions
from models.importing.publish import BY, add_registry_option, default_cache, quiet_stdout, refuse_existing
from models.importing.result import Artifact, GateFailed, ImportRefused
from models.manifest import Manifest, Source, preprocess_as, sha256_file

log = logging.getLogger("triserve.importer")

SERVED_AS_DETECTION = {
    "segment": "segmentation checkpoint served as detection: boxes and classes only, the mask branch (coefficients "
               "and prototypes) was cut before export; masks are not served",
    "pose": "pose checkpoint served as detection: boxes and classes only, the keypoint branch was cut before "
            "export; keypoints are not served",
}
REFUSED_TASKS = {
    "obb": "oriented-box (OBB) checkpoint: its boxes are rotated (cx, cy, w, h, angle). Serving their axis-aligned "
           "enclosing boxes would change the answer: the detection family's axis-aligned NMS suppresses neighbouring "
           "rotated objects whose enclosing boxes overlap, where ultralytics' rotated NMS keeps them. Needs an OBB "
           "family",
    "classify": "image-classification checkpoint (a Classify head): one class distribution per image, no boxes for "
                "the detection family to serve. Import it with `triserve import classification-pt` (the "
                "image-classification family: centre-crop preprocessing, top-k labels)",
    "semantic": "semantic-segmentation checkpoint: a per-pixel class map, no boxes",
    "depth": "depth checkpoint: a per-pixel depth map, no boxes",
}
REFUSED_MODELS = {
    "RTDETRDetectionModel": "RT-DETR checkpoint: its decoder outputs [b, queries, 4 + nc] (normalised cx, cy, w, h and "
                            "class scores after its own query selection), not a YOLO head this family decodes",
    "WorldModel": "YOLO-World checkpoint: open-vocabulary head (class scores from text embeddings set at run time)",
    "YOLOEModel": "YOLOE checkpoint: open-vocabulary head (class scores from text/visual prompt embeddings)",
    "YOLOESegModel": "YOLOE segmentation checkpoint: open-vocabulary head",
}
DETECT_BRANCHES = ("cv2", "cv3", "dfl", "one2one_cv2", "one2one_cv3")
STUB_PACKAGES = ("omegaconf",)  # config containers pickled in old (8.0.x, hydra era) checkpoints' training args
# not a training project's own code: the YOLOv5 repo's modules, which ultralytics' loader refuses with its own message
FOREIGN_PACKAGES = ("models",)
_CANT_GET = re.compile(r"Can't get attribute '([^']+)' on <module '([^']+)'")


@dataclass(frozen=True)
class PtParams:
    """Parity cases of the export and the ultralytics cross-check (its tolerances come from ImportParams)."""

    parity_batches: tuple[int, ...] = (1, 4, 32)
    parity_sizes: tuple[tuple[int, int], ...] | None = None  # default: half, full and a wider size of imgsz
    proof_batches: tuple[int, ...] = (4, 2)
    tolerance: float = 1e-4
    check: ImportParams = PARAMS


PT_PARAMS = PtParams()


# -- reading the checkpoint -------------------------------------------------------------------------------------------
class _Stub:
    """Stands in for a class of a missing config package while unpickling: keeps whatever state it is given."""

    def __init__(self, *args, **kwargs):
        self.__dict__["_args"] = args

    def __setstate__(self, state):
        self.__dict__["_state"] = state


def _stub_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package: submodules import
    classes: dict[str, type] = {}

    def getattr_(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr not in classes:
            classes[attr] = type(attr, (_Stub,), {"__module__": name})
        return classes[attr]

    mod.__dict__["__getattr__"] = getattr_  # the module's own __getattr__ (PEP 562)
    return mod


class _StubFinder:
    """Meta-path finder that answers imports of STUB_PACKAGES (and their submodules) with stub modules."""

    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages

    def find_spec(self, fullname, path=None, target=None):
        import importlib.machinery

        if fullname.split(".")[0] in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _stub_module(spec.name)

    def exec_module(self, module):
        return None


@contextlib.contextmanager
def _stubbed(packages: tuple[str, ...]):
    """While unpickling: the missing packages import as stubs; afterwards they are gone again."""
    finder = _StubFinder(packages)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".")[0] in packages]:
            spec = getattr(sys.modules[name], "__spec__", None)
            if isinstance(sys.modules[name], types.ModuleType) and spec is not None and spec.loader is finder:
                del sys.modules[name]


def _plain(obj, depth: int = 0):
    """Stub config containers -> plain Python (DictConfig -> dict, ListConfig -> list, nodes -> their value)."""
    if depth > 50:
        return None
    if isinstance(obj, _Stub):
        state = obj.__dict__.get("_state")
        if isinstance(state, dict):
            if "_content" in state:
                return _plain(state["_content"], depth + 1)
            if "_val" in state:
                return _plain(state["_val"], depth + 1)
        return None
    if isinstance(obj, dict):
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v, depth + 1) for v in obj)
    return obj


def _has_stub(obj, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(obj, _Stub):
        return True
    if isinstance(obj, dict):
        return any(_has_stub(k, depth + 1) or _has_stub(v, depth + 1) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return any(_has_stub(v, depth + 1) for v in obj)
    return False


def _missing(packages: tuple[str, ...]) -> tuple[str, ...]:
    import importlib.util

    return tuple(p for p in packages if importlib.util.find_spec(p) is None)


def load_checkpoint_dict(weights: Path) -> tuple[dict, list[str]]:
    """ultralytics' own checkpoint loader (legacy module renames included), with stand-ins for missing config
    packages; (checkpoint dict with plain args, notes)."""
    from ultralytics.nn.tasks import torch_safe_load

    notes: list[str] = []
    missing = custom_code.missing_globals(Path(weights), ignore_packages=STUB_PACKAGES + FOREIGN_PACKAGES)
    if missing:
        raise ImportRefused(f"{Path(weights).name}: the checkpoint pickles classes that are not defined here: "
                            f"{custom_code.describe_missing(missing)} (custom modules are code: pass only files "
                            f"you trust)")
    stubs = _missing(STUB_PACKAGES)
    try:
        with _stubbed(stubs) if stubs else contextlib.nullcontext():
            ckpt, _ = torch_safe_load(str(weights))
    except ImportRefused:
        raise
    except AttributeError as exc:  # a class the pre-scan could not see missing (an older, non-zip checkpoint)
        found = _CANT_GET.search(str(exc))
        if not found:
            raise ImportRefused(f"{Path(weights).name}: not a loadable ultralytics checkpoint: {exc}") from exc
        module = found.group(2)
        main_spec = getattr(sys.modules["__main__"], "__spec__", None)  # `python -m x`: __main__ shows as 'x'
        if main_spec is not None and module == main_spec.name:
            module = "__main__"
        what = (custom_code.describe_missing({module: [found.group(1)]}) if module == "__main__" else
                f"{module}.{found.group(1)} (the installed {module!r} does not define it): pass --custom-modules "
                f"{module}=FILE.py with the training project's file that does")
        raise ImportRefused(f"{Path(weights).name}: the checkpoint pickles classes that are not defined here: {what} "
                            f"(custom modules are code: pass only files you trust)") from exc
    except Exception as exc:  # unreadable, foreign (YOLOv5 repo), TorchScript, ...
        raise ImportRefused(f"{Path(weights).name}: not a loadable ultralytics checkpoint: {type(exc).__name__}: "
                            f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc!r}") from exc
    model = ckpt.get("ema") or ckpt.get("model")
    if model is None or not hasattr(model, "model"):
        raise ImportRefused(f"{Path(weights).name}: the checkpoint holds no ultralytics model ('model'/'ema')")
    for key in list(ckpt):
        if key not in ("model", "ema") and _has_stub(ckpt[key]):
            ckpt[key] = _plain(ckpt[key])
            notes.append(f"checkpoint '{key}' read from pickled {'/'.join(stubs)} containers as plain data")
    for attr in ("args", "yaml"):
        value = getattr(model, attr, None)
        if _has_stub(value):
            setattr(model, attr, _plain(value))
            notes.append(f"model.{attr} read from pickled {'/'.join(stubs)} containers as plain data")
    return ckpt, notes


class _NoStubPickler:
    """Pickles into nothing, raising on any stand-in left in the object graph (it could not be loaded again)."""

    @staticmethod
    def check(obj, where: str) -> None:
        import pickle

        class Sink:
            def write(self, b):
                return len(b)

        class P(pickle.Pickler):
            def reducer_override(self, o):
                if isinstance(o, _Stub):
                    raise ImportRefused(f"{where}: holds a {type(o).__module__}.{type(o).__name__} object that only "
                                        f"its (missing) package can restore, outside the training args")
                return NotImplemented

        P(Sink(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


def _save_checkpoint(model, train_args: dict, source: dict, dst: Path) -> Path:
    import torch

    _NoStubPickler.check(model, dst.name)
    torch.save({"model": model, "train_args": dict(train_args), "date": source.get("date"),
                "version": source.get("version"), "license": source.get("license"), "docs": source.get("docs"),
                "triserve": source.get("triserve", {})}, str(dst))
    return dst


def _task_of(model) -> str:
    from ultralytics.nn.tasks import guess_model_task

    args = getattr(model, "args", None)
    if isinstance(args, dict) and args.get("task"):
        return str(args["task"])
    return str(getattr(model, "task", None) or guess_model_task(model))


def detection_only(model, task: str):
    """A deep copy of a segmentation / pose model whose head is its Detect part: same box and class branches (same
    weights), mask / keypoint branches removed. Its forward is Detect's: [b, 4 + nc, anchors] or the end-to-end rows."""
    from ultralytics.nn.modules.head import Detect
    from ultralytics.nn.tasks import DetectionModel

    det = copy.deepcopy(model)
    head = det.model[-1]
    if not isinstance(head, Detect):
        raise ImportRefused(f"{task} head {type(head).__name__} is not built on ultralytics' Detect head")
    dropped = [n for n in list(head._modules) if n not in DETECT_BRANCHES]
    for n in dropped:
        del head._modules[n]
    head.__class__ = Detect
    det.__class__ = DetectionModel
    det.task = "detect"
    if isinstance(getattr(det, "args", None), dict):
        det.args = {**det.args, "task": "detect"}
    if isinstance(getattr(det, "yaml", None), dict) and det.yaml.get("head"):
        det.yaml = copy.deepcopy(det.yaml)
        with contextlib.suppress(Exception):  # only read to name the task: keep the rest as it was
            det.yaml["head"][-1] = [*det.yaml["head"][-1][:2], "Detect", list(det.yaml["head"][-1][3])[:1]]
        det.yaml.pop("kpt_shape", None)
    head.__dict__["triserve_dropped"] = dropped  # a plain attribute (nn.Module's setattr types tensors/modules)
    return det


@dataclass
class CheckpointInfo:
    path: Path
    sha256: str
    task: str
    model_class: str
    head: str  # head class name
    nc: int
    labels: list[str]
    train_imgsz: int | None
    end2end_capable: bool
    reference: Path  # the re-saved checkpoint in its own task: what ultralytics predicts with
    served: Path  # what is exported: the reference, or its detection-only copy
    served_as: str  # 'detection' | SERVED_AS_DETECTION[task] | the task itself (inspect_checkpoint's full_head)
    dropped: list[str] = field(default_factory=list)  # head branches cut (segment/pose)
    notes: list[str] = field(default_factory=list)
    ultralytics_version: str | None = None  # that saved the checkpoint
    license: str | None = None

    def describe(self) -> dict:
        d = asdict(self)
        d["path"], d["reference"], d["served"] = self.path.name, self.reference.name, self.served.name
        return d


def inspect_checkpoint(weights: Path, work_dir: Path, cache_dir: Path | None = None,
                       full_head: tuple[str, ...] = ()) -> CheckpointInfo:
    """Load, decide (accept / serve as detection / refuse with the reason) and stage the checkpoint(s) to export.

    `full_head`: tasks whose whole head is served (the pose family's importer passes ('pose',)): no detection-only
    copy is made for them, `served` is the re-saved checkpoint with its keypoint branch."""
    weights = Path(weights)
    if not weights.is_file():
        raise ImportRefused(f"{weights}: no such file")
    setup_ultralytics(Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "triserve-importer")
    ckpt, notes = load_checkpoint_dict(weights)
    loaded = ckpt.get("ema") or ckpt.get("model")
    assert loaded is not None, "load_checkpoint_dict refuses a checkpoint without one"
    model = loaded.float().eval()
    model_class = type(model).__name__
    if model_class in REFUSED_MODELS:
        raise ImportRefused(f"{weights.name}: {REFUSED_MODELS[model_class]}")
    train_args = ckpt.get("train_args") or {}
    if not isinstance(train_args, dict):
        train_args = {}
    if not isinstance(getattr(model, "args", None), dict):
        model.args = dict(train_args)
    task = _task_of(model)
    if task in REFUSED_TASKS:
        raise ImportRefused(f"{weights.name}: {REFUSED_TASKS[task]}")
    head = model.model[-1]
    head_name = type(head).__name__
    if task not in ("detect", "segment", "pose"):
        raise ImportRefused(f"{weights.name}: task {task!r} ({head_name}) is not a detection task")
    if "RTDETR" in head_name:
        raise ImportRefused(f"{weights.name}: {REFUSED_MODELS['RTDETRDetectionModel']}")
    labels = class_names(model)
    nc = int(getattr(head, "nc", len(labels)))
    if nc != len(labels):
        raise ImportRefused(f"{weights.name}: the head has {nc} classes but the checkpoint names {len(labels)}")
    imgsz = train_args.get("imgsz") or (model.args.get("imgsz") if isinstance(model.args, dict) else None)
    imgsz = int(max(imgsz)) if isinstance(imgsz, (list, tuple)) else (int(imgsz) if imgsz else None)
    source = {k: ckpt.get(k) for k in ("date", "version", "license", "docs")}
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    reference = _save_checkpoint(model, {**train_args, "task": task}, source, work_dir / f"{weights.stem}.pt")
    served, served_as, dropped = reference, "detection", []
    if task in full_head:
        served_as = task
    elif task in SERVED_AS_DETECTION:
        det = detection_only(model, task)
        dropped = list(det.model[-1].triserve_dropped)
        served = _save_checkpoint(det, {**train_args, "task": "detect"},
                                  {**source, "triserve": {"converted_from": task, "dropped": dropped}},
                                  work_dir / f"{weights.stem}.detect.pt")
        served_as = SERVED_AS_DETECTION[task]
    return CheckpointInfo(path=weights, sha256=sha256_file(weights), task=task, model_class=model_class,
                          head=head_name, nc=nc, labels=labels, train_imgsz=imgsz,
                          end2end_capable=end2end_capable(model), reference=reference, served=served,
                          served_as=served_as, dropped=dropped, notes=notes,
                          ultralytics_version=str(source["version"]) if source.get("version") else None,
                          license=str(source["license"]) if source.get("license") else None)


# -- the import -------------------------------------------------------------------------------------------------------
def _photo_paths(photos) -> list[Path]:
    return [p.path for p in photos.all()]


def import_detection_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None = None,
                        head: str = "auto", data: Path | None = None, photos=None, cache_dir: Path | None = None,
                        verify_ultralytics: bool | None = None, params: PtParams = PT_PARAMS,
                        license: str | None = None, require_license: bool = False,
                        custom_modules: Sequence[str] = ()) -> tuple[Artifact, dict]:
    """Read, decide, export, prove, verify and describe an ultralytics .pt; the artifact is staged in `work_dir`.

    `photos`: a models.importing.photos.PhotoSet for the ultralytics cross-check (default: the package photos,
    downloaded into `cache_dir`). `verify_ultralytics`: None = when ultralytics is installed (it is: the export
    needs it); False = skipped (recorded). `license`: SPDX expression of the weights (else the checkpoint's
    `license` entry, else NOASSERTION, or LicenseRequired with `require_license`: models/importing/licenses.py).
    `custom_modules`: '[PICKLED_NAME=]MODULE_OR_FILE' specs of the training code's own layers
    (models/importing/custom_modules.py), loaded for every step that unpickles the checkpoint (reading, the ONNX
    export, ultralytics' predictor; all in this process) and removed afterwards. They run as code.
    """
    with custom_code.custom_modules(custom_modules) as loaded:
        return _import_detection_pt(weights, name, version, work_dir, imgsz=imgsz, head=head, data=data,
                                    photos=photos, cache_dir=cache_dir, verify_ultralytics=verify_ultralytics,
                                    params=params, license=license, require_license=require_license, loaded=loaded)


def _import_detection_pt(weights: Path, name: str, version: str, work_dir: Path, *, imgsz: int | None,
                         head: str, data: Path | None, photos, cache_dir: Path | None,
                         verify_ultralytics: bool | None, params: PtParams, license: str | None,
                         require_license: bool, loaded: list[custom_code.CustomModule]) -> tuple[Artifact, dict]:
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def lap(key: str) -> None:
        timings[key] = round(time.monotonic() - t0 - sum(timings.values()), 2)

    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    work_dir = Path(work_dir)
    info = inspect_checkpoint(weights, work_dir / "checkpoint", cache_dir / "detection-pt")
    if head == "end2end" and not info.end2end_capable:
        raise ImportRefused(f"{info.path.name}: --head end2end, but its {info.head} head has no one-to-one (NMS-free) "
                            f"branch (only YOLOv10 / YOLO26-style heads do); use --head auto or anchors")
    weights_license = resolve_license(license, spdx_from_text(info.license), info.path.name, required=require_license)
    lap("read")
    description = (
        f"user ultralytics checkpoint {info.path.name} (sha256 {info.sha256}; task {info.task}, {info.model_class} "
        f"with a {info.head} head, saved by ultralytics {info.ultralytics_version or '?'}; weights license per the "
        f"checkpoint: {info.license or 'not stated'}); {info.served_as}. Imported by "
        f"families/detection/importers/checkpoint.py")
    try:
        art = export_user_model(info.served, name, version, work_dir / "export", imgsz=imgsz, data=data,
                                batches=params.parity_batches,
                                sizes=[list(s) for s in params.parity_sizes] if params.parity_sizes else None,
                                tolerance=params.tolerance, cache_dir=cache_dir / "detection-pt",
                                head=head, proof_batches=params.proof_batches, description=description)
    except ValueError as exc:
        raise ImportRefused(str(exc)) from exc
    m = art.manifest
    onnx_path = art.staging / m.model_file
    lap("export+parity")

    c = params.check
    ultra = None
    photo_set = None
    if verify_ultralytics is not False:
        photo_set = photos if photos is not None else package_photos(cache_dir)
        images = _photo_paths(photo_set)
        if not images:
            raise GateFailed("no photos to verify against ultralytics: need the package photos or --images DIR")
        ultra = verify_against_ultralytics(onnx_path, images, m.preprocess, m.labels, conf=c.ultralytics_conf,
                                           iou=c.ultralytics_iou, min_iou=c.ultralytics_min_iou,
                                           max_score_diff=c.ultralytics_max_score_diff,
                                           cache_dir=cache_dir / "detection-pt", reference=info.reference)
        if not ultra.passed:
            raise GateFailed(f"{name}: triserve's pipeline on the exported graph disagrees with ultralytics' "
                             f"predictor on {info.path.name}: {ultra.describe()}")
        if ultra.agreement.reference_boxes == 0:
            log.warning("%s: ultralytics found no box on the %d photos: the cross-check is vacuous; pass --images "
                        "with photos of the model's own domain", name, len(images))
    lap("ultralytics")

    metrics = dict(m.metrics)
    gates = dict(m.gates)
    reference = m.reference
    if ultra is not None:
        metrics.update(ultra.metrics())
        gates["ultralytics_agreement"] = ultra.passed
        if not reference:  # drift references from the served pipeline on the photos (no labelled data given)
            sess = ort_session(onnx_path, threads=1)
            batch = 1 if isinstance(m.inputs[0].shape[0], int) else 4
            dets = run_detector(sess, [read_rgb(p) for p in _photo_paths(photo_set)], m.preprocess,
                                nms_params(c.serving_conf, c.serving_iou, max_det=100, topk=1000), batch=batch)
            reference = detection_references(dets)
    recipe = {**m.source.recipe, "importer": "families/detection/importers/checkpoint.py",
              "checkpoint": info.describe(), "params": asdict(params),
              "photos": photo_set.describe() if photo_set is not None else None,
              "custom_modules": [c.describe() for c in loaded],
              "ultralytics_check": "skipped" if ultra is None else "passed"}
    manifest = m.model_copy(update={
        "metrics": metrics, "gates": gates, "reference": reference,
        "source": Source(kind="user", description=description, recipe=recipe, license=weights_license,
                         packages=package_versions("torch", "ultralytics", "onnx", "onnxruntime"))})
    Manifest.model_validate(manifest.model_dump())
    lap("describe")
    pre = preprocess_as(m, DetectionPreprocess)
    report = {"name": name, "version": version, "checkpoint": info.describe(), "head": pre.head,
              "imgsz": pre.imgsz, "classes": len(m.labels), "dynamic_batch": gates.get("dynamic_batch"),
              "parity_worst": _worst(m.parity), "ultralytics": ultra.report() if ultra is not None else "skipped",
              "photos_missing": photo_set.missing if photo_set is not None else [],
              "custom_modules": [c.describe() for c in loaded], "timings_s": timings}
    return Artifact(staging=art.staging, manifest=manifest), report


def _worst(parity) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in parity:
        key = ("batch-proof/" if "-vs-" in c.case else "torch/") + c.case.rsplit("/", 1)[-1]
        out[key] = max(out.get(key, 0.0), c.max_abs_diff)
    return out


def publish_detection_pt(weights: Path, name: str, version: str, registry, *, alias: str | None = None,
                         cache_dir: Path | None = None, images: Path | None = None, **kw) -> tuple[Manifest, dict]:
    """import_detection_pt + publish into `registry` (models.registry.LocalRegistry); (published manifest, report).
    `images`: a folder of the model's own-domain photos for the ultralytics cross-check. Versions are immutable: an
    existing name:version is refused before any work."""
    refuse_existing(registry, name, version)
    photos = user_photos(images) if images else None
    work = Path(tempfile.mkdtemp(prefix="triserve-import-pt-"))
    try:
        art, report = import_detection_pt(weights, name, version, work, photos=photos, cache_dir=cache_dir, **kw)
        published = registry.publish(art.staging, art.manifest)
        if alias:
            registry.set_alias(name, alias, version, by=f"{BY} detection-pt")
        return published, report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def log_report(report: dict) -> None:
    ck = report["checkpoint"]
    log.info("%s: task %s (%s, %s head) -> %s head, imgsz %d, dynamic batch %s; %s", ck["path"], ck["task"],
             ck["model_class"], ck["head"], report["head"], report["imgsz"], report["dynamic_batch"], ck["served_as"])
    log.info("parity (worst): %s", {k: f"{v:.3g}" for k, v in report["parity_worst"].items()})
    if isinstance(report.get("ultralytics"), list):
        for row in report["ultralytics"]:
            log.info("ultralytics vs triserve %s: %d vs %d boxes, %d matched, min IoU %.6f, max score diff %.2g",
                     row["image"], row["reference"], row["candidate"], row["matched"], row["min_iou"],
                     row["max_score_diff"])
    log.info("timings (s): %s", report.get("timings_s"))


# -- CLI --------------------------------------------------------------------------------------------------------------
def _cmd(args) -> int:
    from models.registry import LocalRegistry, RegistryError

    params = PT_PARAMS
    if args.parity_batches:
        params = PtParams(parity_batches=tuple(args.parity_batches))
    try:
        with quiet_stdout():
            m, report = publish_detection_pt(args.weights, args.name, args.version, LocalRegistry(args.registry),
                                             alias=args.alias, cache_dir=args.cache, images=args.images,
                                             imgsz=args.imgsz, head=args.head, data=args.data, params=params,
                                             verify_ultralytics=False if args.no_verify else None,
                                             license=args.license, require_license=True,
                                             custom_modules=args.custom_modules or ())
    except (GateFailed, RegistryError, ValueError) as exc:
        log.error("nothing published: %s", exc)
        return 2
    log_report(report)
    pre = preprocess_as(m, DetectionPreprocess)
    print(json.dumps({"name": m.name, "version": m.version, "labels": m.labels, "head": pre.head,
                      "imgsz": pre.imgsz, "inputs": [i.model_dump() for i in m.inputs],
                      "outputs": [o.model_dump() for o in m.outputs], "gates": m.gates,
                      "metrics": {k: round(v, 6) for k, v in m.metrics.items()},
                      "parity_max_abs_diff": max((c.max_abs_diff for c in m.parity), default=None),
                      "report": report}, indent=2, default=str))
    return 0


def add_parser(subparsers) -> None:
    """Register `detection-pt` on the `triserve import` parser (triserve/importers.py)."""
    p = subparsers.add_parser("detection-pt", help="import an ultralytics .pt (detect; segment/pose served as "
                                                   "detection; YOLOv10/YOLO26 end-to-end heads)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", type=Path, required=True, help="the .pt checkpoint")
    p.add_argument("--name", required=True, help="registry model name")
    p.add_argument("--version", required=True, help="immutable version")
    p.add_argument("--head", choices=("auto", "anchors", "end2end"), default="auto",
                   help="auto: the NMS-free end-to-end branch where the head has one (YOLOv10, YOLO26), else anchors")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size (default: the checkpoint's train imgsz)")
    p.add_argument("--data", type=Path, default=None, help="ultralytics data yaml to score the model on")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for the ultralytics cross-check (default: package photos)")
    add_registry_option(p)
    p.add_argument("--alias", default=None, help="also point this alias at the new version")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel, photo and ultralytics cache")
    p.add_argument("--parity-batches", type=int, nargs="+", default=None, help="torch parity batches (default 1 4 32)")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as skipped)")
    p.add_argument("--custom-modules", action="append", default=None, metavar="[PICKLED_NAME=]MODULE_OR_FILE",
                   help="the training code's own layers, for a checkpoint that pickles them (e.g. __main__.C2fX): a "
                        ".py file or an importable module whose public classes and functions are put in __main__; "
                        "PICKLED_NAME= also registers it under the module name the pickle recorded "
                        "(mytrain.layers=layers.py). Repeatable. SECURITY: this is code, run during the import, "
                        "as loading the pickle itself is: pass only files you trust")
    add_license_option(p)
    p.set_defaults(func=_cmd)
