"""Reading an ultralytics .pt checkpoint for an import: loaded as ultralytics loads it (old checkpoints' pickled
omegaconf containers read by a stand-in, a training project's own layers refused by name until --custom-modules
supplies them), decided by task and head (accepted, served as detection with its mask or keypoint branch cut, or
refused with the reason) and re-saved into the work dir for the export. checkpoint.py's docstring says what each task
becomes; the pose and segmentation importers build on inspect_checkpoint."""
from __future__ import annotations

import contextlib
import copy
import re
import sys
import tempfile
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

from triserve.families.detection.importers.export import class_names, end2end_capable
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.models.importing import custom_modules as custom_code
from triserve.models.importing.result import ImportRefused
from triserve.models.manifest import sha256_file

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


def _load(weights: Path, notes: list[str]) -> dict:
    """weights_only first (ultralytics' allow-list of its own and torch's model classes: nothing else is called);
    a checkpoint that needs more (custom layers, old config containers) is fully unpickled, with a note. The
    `triserve import *-pt` commands do both in the isolated child (models/importing/sandbox.py)."""
    import pickle

    from ultralytics.nn.tasks import torch_safe_load

    try:
        ckpt, _ = torch_safe_load(str(weights), safe_only=True)
        return ckpt
    except (pickle.UnpicklingError, RuntimeError, AttributeError, ModuleNotFoundError, TypeError) as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    ckpt, _ = torch_safe_load(str(weights), safe_only=False)
    notes.append(f"read by full unpickling: the weights_only allow-list refused it ({reason})")
    return ckpt


def load_checkpoint_dict(weights: Path) -> tuple[dict, list[str]]:
    """ultralytics' own checkpoint loader (legacy module renames included), with stand-ins for missing config
    packages; (checkpoint dict with plain args, notes)."""
    notes: list[str] = []
    missing = custom_code.missing_globals(Path(weights), ignore_packages=STUB_PACKAGES + FOREIGN_PACKAGES)
    if missing:
        raise ImportRefused(f"{Path(weights).name}: the checkpoint pickles classes that are not defined here: "
                            f"{custom_code.describe_missing(missing)} (custom modules are code: pass only files "
                            f"you trust)")
    stubs = _missing(STUB_PACKAGES)
    try:
        with _stubbed(stubs) if stubs else contextlib.nullcontext():
            ckpt = _load(weights, notes)
    except (ImportRefused, MemoryError):
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
