"""Detection builder: train YOLOv8n on synthetic shapes, export to ONNX, gate on parity and mAP, publish two variants.

    python -m scripts.pipeline build --tasks detection              # driven by the pipeline (default recipe)
    python -m scripts.detection.build export --weights best.pt --name my-det --version 1.0.0 --registry models/store

Artifacts:
  yolo-shapes       primary: yolov8n from its yaml (random init, nothing downloaded), trained by RECIPES[profile]
  yolo-shapes-lite  fallback: the same graph served at a smaller letterbox size (fewer pixels -> fewer FLOPs)

Why the fallback is the same weights at a smaller size: the graph has dynamic height/width, so the cheaper variant
costs nothing to keep in sync, and the manifest's preprocess.imgsz is what makes it cheaper. It is measured, not
assumed: its mAP on the same test split and its latency (interleaved with the primary's) are gated and recorded.

Every number in the manifests comes from the serving path: ONNX Runtime with families/detection/preprocess.py and
families/detection/postprocess.py (scripts/detection/evaluate.py), never from ultralytics' own validator.

Parity (torch fp32 eval vs ONNX Runtime, batches 1/4/32, several sizes incl. non-square) is two checks per case:
class scores within 1e-4 absolute, and box coordinates within 1e-4 of the input's longer side (pixels are ~3e-5 per
float32 ulp at 256-512 px, and a faithful export measures up to ~7e-4 px; see check_parity). Both are recorded.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from families.detection.manifest import DetectionPreprocess
from models.manifest import (
    PROJECT_LICENSE,
    Manifest,
    ParityCheck,
    Source,
    TensorSpec,
    sha256_file,
    utcnow,
)
from scripts.common import (
    LOCAL_REGISTRY,
    PIPELINE_CACHE,
    Artifact,
    BuildContext,
    GateFailed,
    data_fingerprint,
    git_commit,
    histogram_reference,
    ort_session,
    package_versions,
    parity_gate,
    seed_everything,
    stable_hash,
)

log = logging.getLogger("triserve.pipeline.detection")

ARTIFACTS = ("yolo-shapes", "yolo-shapes-lite")
# trained here from random init (the YOLOv8n yaml) on generated shapes, with ultralytics (AGPL-3.0), whose terms
# Ultralytics applies to models trained with it: recorded with both, conservatively
SHAPES_LICENSE = f"{PROJECT_LICENSE} AND AGPL-3.0-only"
PRIMARY, FALLBACK = ARTIFACTS
CONFIDENCE_BINS = np.linspace(0, 1, 21)
BOXES_PER_IMAGE_BINS = np.arange(0, 32)  # one bin per count 0..30: [0,1), [1,2), ..., [30,31]; counts clip at 30

_COMMON = {
    "version": "1.0.0",
    "model": "yolov8n.yaml",  # architecture only: random init, no pretrained weights
    "seed": 0,
    "max_objects": 6,
    "optimizer": "AdamW",
    "warmup_epochs": 1.0,
    "workers": 0,
    "opset": 17,
    "parity_tolerance": 1e-4,
    "parity_batches": [1, 4, 32],
    "eval_conf": 0.001,
    "eval_iou": 0.7,
    "latency_runs": 30,
}

RECIPES: dict[str, dict] = {
    # ~9.5 min on 2 shared CPU cores: generation ~8 s, training capped at 9 min (~40 epochs), export + gates ~10 s.
    # Measured: test mAP50 0.978 / mAP50-95 0.816 at 256; the fallback at 160: 0.912 / 0.697, about 2x faster.
    "default": {
        **_COMMON,
        "n_train": 240,
        "n_val": 40,
        "n_test": 80,
        "image_size": 320,  # generated images are 320x320
        "imgsz": 256,  # network input for training and for the primary
        "epochs": 60,  # ignored while time_cap_minutes is set: ultralytics re-plans epochs to fill the cap
        "time_cap_minutes": 9.0,
        "batch": 8,
        "nbs": 64,
        "lr0": 0.003,
        "close_mosaic": 3,
        "fallback_imgsz": 160,
        "parity_sizes": [[160, 160], [256, 256], [320, 320], [256, 320]],
        "enforce_quality": True,
        "min_map50": 0.75,  # hard floor (the target is >= 0.85; time-capped training on a slower box does less)
        "max_map50_drop": 0.15,  # fallback may lose at most this much mAP50 against the primary
        "min_speedup": 1.2,  # fallback must be at least this much faster (batch-1 median latency)
    },
    # For tests: a valid model, manifest and fallback in well under a minute; quality is recorded, not enforced.
    "tiny": {
        **_COMMON,
        "n_train": 16,
        "n_val": 4,
        "n_test": 8,
        "image_size": 96,
        "max_objects": 3,
        "imgsz": 64,
        "epochs": 1,
        "time_cap_minutes": None,
        "batch": 8,
        "nbs": 8,
        "lr0": 0.003,
        "close_mosaic": 0,
        "fallback_imgsz": 32,
        "parity_sizes": [[32, 32], [64, 64], [96, 96], [64, 96]],
        "parity_batches": [1, 4, 32],
        "latency_runs": 10,
        "enforce_quality": False,
        "min_map50": 0.75,
        "max_map50_drop": 0.15,
        "min_speedup": 1.2,
    },
}

_TRAIN_KEYS = ("model", "seed", "imgsz", "epochs", "time_cap_minutes", "batch", "nbs", "lr0", "optimizer",
               "warmup_epochs", "close_mosaic", "workers")


# -- ultralytics, offline ---------------------------------------------------------------------------------------------
def setup_ultralytics(cache_dir: Path) -> Path:
    """Make ultralytics work offline: env before its first import, fonts where its plotting looks, no auto-install.

    Returns the ultralytics user config dir in use. If ultralytics was imported earlier in this process, its config
    dir is already fixed; the fonts then go there instead.
    """
    cfg = Path(cache_dir) / "ultralytics_cfg"
    if "ultralytics" not in sys.modules:
        os.environ["YOLO_CONFIG_DIR"] = str(cfg)
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_AUTOINSTALL"] = "False"
    os.environ.setdefault("YOLO_VERBOSE", "True")
    import matplotlib

    font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    import ultralytics.utils as uutils

    user_dir = Path(uutils.USER_CONFIG_DIR)
    user_dir.mkdir(parents=True, exist_ok=True)
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (user_dir / name).is_file():
            shutil.copyfile(font, user_dir / name)
    uutils.AUTOINSTALL = False
    return user_dir


# -- data -------------------------------------------------------------------------------------------------------------
def make_dataset(ctx: BuildContext, recipe: dict):
    from scripts.detection.dataset import ShapesSpec, generate

    spec = ShapesSpec(seed=recipe["seed"], n_train=recipe["n_train"], n_val=recipe["n_val"], n_test=recipe["n_test"],
                      image_size=recipe["image_size"], max_objects=recipe["max_objects"])
    root = ctx.cache_dir / "datasets" / stable_hash(spec.key())[:16]
    return generate(root, spec)


def labelled_split(dataset, split: str):
    from scripts.detection.evaluate import yolo_labels

    return [yolo_labels(p, dataset.label_path(p)) for p in dataset.images(split)]


# -- training ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trained:
    weights: Path
    info: dict
    cached: bool


def train(ctx: BuildContext, recipe: dict, dataset) -> Trained:
    """Train (or reuse) the weights for this recipe; cached by dataset spec + training params + package versions."""
    key = stable_hash({"dataset": dataset.spec.key(), "train": {k: recipe.get(k) for k in _TRAIN_KEYS},
                       "packages": package_versions("torch", "ultralytics")})
    wdir = ctx.cache_dir / "weights" / key[:16]
    if (wdir / "best.pt").is_file() and (wdir / "train.json").is_file():
        log.info("detection: reusing cached weights %s", wdir)
        return Trained(wdir / "best.pt", json.loads((wdir / "train.json").read_text()), True)

    setup_ultralytics(ctx.cache_dir)
    seed_everything(recipe["seed"])
    from ultralytics import YOLO

    model = YOLO(recipe["model"])  # yaml: architecture with random init
    project = ctx.work_dir / "train"
    cap = recipe.get("time_cap_minutes")
    started = time.monotonic()
    model.train(
        data=str(dataset.data_yaml), imgsz=recipe["imgsz"], epochs=recipe["epochs"], time=(cap / 60.0) if cap else None,
        batch=recipe["batch"], nbs=recipe["nbs"], optimizer=recipe["optimizer"], lr0=recipe["lr0"],
        warmup_epochs=recipe["warmup_epochs"], close_mosaic=recipe["close_mosaic"], workers=recipe["workers"],
        seed=recipe["seed"], deterministic=True, pretrained=False, amp=False, plots=False, device="cpu",
        project=str(project), name="run", exist_ok=True, verbose=True, patience=1000,
    )
    seconds = time.monotonic() - started
    trainer = model.trainer
    assert trainer is not None, "model.train() leaves its trainer"
    best = Path(trainer.best) if Path(trainer.best).is_file() else Path(trainer.last)
    metrics = {k: float(v) for k, v in (trainer.metrics or {}).items() if isinstance(v, (int, float))}
    info = {"epochs": int(trainer.epoch) + 1, "seconds": round(seconds, 1),
            "val_map50_ultralytics": metrics.get("metrics/mAP50(B)"),
            "val_map50_95_ultralytics": metrics.get("metrics/mAP50-95(B)")}
    tmp = Path(tempfile.mkdtemp(prefix=".weights-", dir=ctx.cache_dir))
    try:
        shutil.copy2(best, tmp / "best.pt")
        (tmp / "train.json").write_text(json.dumps(info, indent=2))
        if wdir.exists():
            shutil.rmtree(wdir)
        wdir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, wdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("detection: trained %d epochs in %.0f s (ultralytics val mAP50 %s)", info["epochs"], seconds,
             info["val_map50_ultralytics"])
    return Trained(wdir / "best.pt", info, False)


# -- torch model, export, parity --------------------------------------------------------------------------------------
def load_torch_model(weights: Path):
    """The ultralytics nn.Module of a .pt checkpoint: fp32, CPU, eval mode, unfused (the model as trained)."""
    from ultralytics.nn.tasks import load_checkpoint

    model, _ = load_checkpoint(str(weights), device="cpu", fuse=False)
    model = model.float().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def class_names(model) -> list[str]:
    names = model.names
    if isinstance(names, dict):
        return [str(names[i]) for i in sorted(names)]
    return [str(n) for n in names]


def export_onnx(weights: Path, out: Path, imgsz: int, opset: int, end2end: bool = False,
                dynamic: bool = True) -> Path:
    """ultralytics ONNX export, dynamic batch/height/width (or fixed [1, 3, imgsz, imgsz]); the graph lands at `out`.

    end2end: export the NMS-free one-to-one branch of a YOLOv10/YOLO26 head (`nms=False`: output [b, max_det, 6],
    x1, y1, x2, y2, score, class). Without it ultralytics (8.4: `nms=None`) exports the one-to-many branch as an
    anchors head [b, 4 + nc, anchors], also for those models.
    """
    from ultralytics import YOLO

    scratch = Path(tempfile.mkdtemp(prefix="export-", dir=out.parent))
    try:
        local = scratch / "model.pt"
        shutil.copy2(weights, local)  # the exporter writes next to the weights: keep the cache untouched
        produced = YOLO(str(local)).export(format="onnx", dynamic=dynamic, simplify=False, opset=opset, imgsz=imgsz,
                                           device="cpu", batch=1, **({"nms": False} if end2end else {}))
        shutil.move(str(produced), out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def end2end_capable(model) -> bool:
    """The head has a one-to-one (NMS-free) branch: YOLOv10 (v10Detect) and YOLO26-style heads (`end2end: True`)."""
    head = model.model[-1] if hasattr(model, "model") else None
    return getattr(head, "one2one_cv2", None) is not None


def exported_head(onnx_path: Path, nc: int) -> tuple[str, tuple[int, ...]]:
    """('anchors' | 'end2end', output0 shape at batch 1 and the export's own size), read from the graph itself: its
    'end2end' metadata and one probe run (a checkpoint fused down to its one-to-one branch exports end to end
    whatever was asked)."""
    import ast

    import onnx

    from scripts.importer.end2end import is_end2end_shape

    model = onnx.load(str(onnx_path), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    dims = [d.dim_value if d.HasField("dim_value") else None for d in model.graph.input[0].type.tensor_type.shape.dim]
    size = ast.literal_eval(meta.get("imgsz", "[0, 0]")) if meta.get("imgsz") else [dims[2], dims[3]]
    h, w = (int(size[0]), int(size[1])) if isinstance(size, (list, tuple)) else (int(size), int(size))
    out = ort_session(onnx_path, threads=1).run(None, {model.graph.input[0].name: np.zeros((1, 3, h, w),
                                                                                           np.float32)})[0]
    e2e = meta.get("end2end", "").strip().lower() == "true" or is_end2end_shape(out.shape, nc)
    return ("end2end" if e2e else "anchors"), tuple(int(x) for x in out.shape)


def _end2end_k(max_det: int | None) -> int:
    """An end-to-end head's max_det (its TopK k): every end2end code path is given one."""
    if max_det is None:
        raise ValueError("an end2end head needs its max_det")
    return int(max_det)


def _pin_output_channels(onnx_path: Path, nc: int, head: str = "anchors", max_det: int | None = None) -> None:
    """The exporter leaves output0's non-batch axes symbolic ('Concatoutput0_dim_1', 'anchors'). They are 4 + nc by
    construction for an anchors head; for an end-to-end head they are [max_det, 6] (the TopK's k, fixed at export:
    min(300, anchors at the export size)), whatever the names say."""
    import onnx

    model = onnx.load(str(onnx_path))
    dims = model.graph.output[0].type.tensor_type.shape.dim
    changed = False
    want = {1: 4 + nc} if head == "anchors" else {1: _end2end_k(max_det), 2: 6}
    if len(dims) == 3:
        for axis, value in want.items():
            if dims[axis].dim_param or dims[axis].dim_value != value:
                dims[axis].ClearField("dim_param")
                dims[axis].dim_value = value
                changed = True
    if changed:
        onnx.save(model, str(onnx_path))


def _tensor_specs(onnx_path: Path) -> tuple[list[TensorSpec], list[TensorSpec], int]:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    elem = {1: "float32", 10: "float16", 11: "float64", 7: "int64", 6: "int32"}

    def spec(v) -> TensorSpec:
        t = v.type.tensor_type
        shape = [d.dim_param if d.dim_param else int(d.dim_value) for d in t.shape.dim]
        return TensorSpec(name=v.name, dtype=elem.get(t.elem_type, str(t.elem_type)), shape=shape)

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return [spec(v) for v in model.graph.input], [spec(v) for v in model.graph.output], int(opset)


def check_graph_io(inputs: list[TensorSpec], outputs: list[TensorSpec], nc: int, head: str = "anchors",
                   max_det: int | None = None, fixed_size: int | None = None) -> None:
    """What the service serves, and nothing else:
      anchors   images[batch,3,height,width] -> output0[batch,4+nc,anchors]
      end2end   images[batch,3,height,width] -> output0[batch,max_det,6]
    fixed_size: a fixed-batch-1 end-to-end graph (its rows were not proved independent of the batch):
    images[1,3,S,S] -> output0[1,max_det,6].
    """
    batch = 1 if fixed_size else "batch"
    want_in = [batch, 3, fixed_size, fixed_size] if fixed_size else ["batch", 3, "height", "width"]
    if len(inputs) != 1 or inputs[0].shape != want_in:
        raise GateFailed(f"unexpected ONNX inputs {[i.model_dump() for i in inputs]}")
    want_out = [batch, 4 + nc, "anchors"] if head == "anchors" else [batch, _end2end_k(max_det), 6]
    if len(outputs) != 1 or outputs[0].shape != want_out:
        raise GateFailed(f"unexpected ONNX outputs {[o.model_dump() for o in outputs]} for nc={nc}, head {head}"
                         + (f" (expected {want_out})" if head == "end2end" else ""))


def parity_images(batch: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    """[batch,3,H,W] float32 network inputs made from synthetic shape scenes (realistic activations, not noise)."""
    import cv2

    from scripts.detection.dataset import draw_image

    out = np.empty((batch, 3, height, width), np.float32)
    side = max(height, width)
    for i in range(batch):
        img, _ = draw_image(np.random.default_rng([seed, height, width, i]), side, 6)
        if (height, width) != (side, side):
            img = cv2.resize(img, (width, height), interpolation=cv2.INTER_LINEAR)
        out[i] = img.transpose(2, 0, 1).astype(np.float32) / 255.0
    return out


def torch_reference(model, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        y = model(torch.from_numpy(x))
    if isinstance(y, (list, tuple)):
        y = y[0]
    return y.numpy()


def set_end2end(model, max_det: int) -> None:
    """The torch model answers like the end-to-end export: one-to-one branch, top-k of `max_det` rows."""
    model.end2end = True
    model.model[-1].max_det = int(max_det)
    model.model[-1].agnostic_nms = False


def anchor_count(model, height: int, width: int) -> int:
    return int(sum((height // int(s)) * (width // int(s)) for s in model.stride.tolist()))


class _Component:
    """A session view that returns one slice of output0 (boxes or scores): what parity_gate compares per component.

    ORT runs once per feed; the box and score views of the same case share the result.
    """

    def __init__(self, session, channels: slice, memo: dict):
        self.session, self.channels, self.memo = session, channels, memo

    def run(self, names, feeds):
        x = feeds["images"]
        if self.memo.get("x") is not x:  # holding x keeps its identity unique while it is memoised
            self.memo.update(x=x, y=self.session.run(names, feeds)[0])
        return [self.memo["y"][:, self.channels]]


def parity_cases(model, sizes: Sequence[Sequence[int]], batches: Sequence[int],
                 seed: int = 0) -> Iterator[tuple[str, dict[str, np.ndarray], np.ndarray]]:
    """(case, feeds, torch output0) for every batch x size; inputs are synthetic scenes, deterministic in `seed`."""
    for h, w in sizes:
        for b in batches:
            x = parity_images(b, h, w, seed)
            yield f"batch{b}/{h}x{w}", {"images": x}, torch_reference(model, x)


def check_parity(model, onnx_path: Path, sizes: Sequence[Sequence[int]], batches: Sequence[int],
                 tolerance: float = 1e-4, seed: int = 0, progress: bool = True,
                 head: str = "anchors") -> list[ParityCheck]:
    """torch (fp32, eval, CPU) vs ONNX Runtime on every (batch, size); GateFailed past the tolerance.

    Two checks per case, both through scripts.common.parity_gate:
      <case>/scores  class probabilities, max abs diff <= tolerance (1e-4)
      <case>/boxes   cx, cy, w, h in input pixels, max abs diff <= tolerance x the input's longer side
                     (1e-4 of the image side: 0.032 px at 320). float32 box coordinates in pixels carry ~3e-5
                     per ulp at 256-512, and the two runtimes accumulate conv sums in different orders, so a
                     faithful export measures 1e-4..7e-4 px here: a flat 1e-4 px bound would reject it.
    head 'end2end' ([b, max_det, 6] rows after an in-graph top-k; the torch model is switched to its one-to-one
    branch with the same k): the same two checks per case, but order-insensitive (scripts/importer/end2end.py
    compare_rows: near-tied rows may come out in another order and rows at the k-th score may swap): scores as
    sorted score columns, boxes (x1, y1, x2, y2 px) of every row clearly inside the top-k paired with a same-class
    row of a score within the tolerance; a row without such a partner fails the case.
    """
    from tqdm import tqdm

    session = ort_session(onnx_path)
    memo: dict = {}
    checks: list[ParityCheck] = []
    total = len(sizes) * len(batches)
    if head == "end2end":
        from scripts.importer.end2end import compare_batch

        name = session.get_inputs()[0].name
        paired = 0
        for case, feeds, expected in tqdm(parity_cases(model, sizes, batches, seed), total=total, desc="parity",
                                          disable=not progress):
            side = float(max(feeds["images"].shape[2:]))
            got = session.run(None, {name: feeds["images"]})[0]
            if got.shape != expected.shape:
                raise GateFailed(f"parity {case}: shape {got.shape} != reference {expected.shape}")
            diff = compare_batch(expected, got, tolerance)
            paired += int(diff["paired"])  # a count of rows
            checks.append(ParityCheck(case=f"{case}/scores", max_abs_diff=diff["scores"], tolerance=tolerance,
                                      passed=diff["scores"] <= tolerance))
            checks.append(ParityCheck(case=f"{case}/boxes", max_abs_diff=diff["boxes"], tolerance=tolerance * side,
                                      passed=diff["boxes"] <= tolerance * side))
        failed = [c for c in checks if not c.passed]
        if failed:
            worst = max(failed, key=lambda c: c.max_abs_diff)
            raise GateFailed(f"parity gate failed on {len(failed)} case(s); worst {worst.case}: "
                             f"max abs diff {worst.max_abs_diff:.3g} > {worst.tolerance:g}")
        if not paired:
            raise GateFailed("parity: no end-to-end row stood clear of the top-k boundary in any case (flat scores): "
                             "no box could be compared")
        log.info("parity: %d end-to-end rows paired and compared", paired)
    else:
        for case, feeds, expected in tqdm(parity_cases(model, sizes, batches, seed), total=total, desc="parity",
                                          disable=not progress):
            side = float(max(feeds["images"].shape[2:]))
            checks += parity_gate([(f"{case}/scores", feeds, expected[:, 4:])],
                                  _Component(session, slice(4, None), memo=memo), tolerance)
            checks += parity_gate([(f"{case}/boxes", feeds, expected[:, :4])],
                                  _Component(session, slice(0, 4), memo=memo), tolerance * side)
    worst_box = max((c for c in checks if c.case.endswith("/boxes")), key=lambda c: c.max_abs_diff)
    worst_score = max((c for c in checks if c.case.endswith("/scores")), key=lambda c: c.max_abs_diff)
    log.info("parity: %d checks passed; worst boxes %s %.3g px (tol %.3g), worst scores %s %.3g (tol %.3g)",
             len(checks), worst_box.case, worst_box.max_abs_diff, worst_box.tolerance, worst_score.case,
             worst_score.max_abs_diff, worst_score.tolerance)
    return checks


# -- evaluation -------------------------------------------------------------------------------------------------------
def reference_distribution(result) -> dict[str, dict[str, list[float]]]:
    return {
        "confidence": histogram_reference(result.confidences, CONFIDENCE_BINS),
        "boxes_per_image": histogram_reference(np.minimum(result.boxes_per_image, 30), BOXES_PER_IMAGE_BINS),
    }


def eval_nms_params(recipe: dict):
    from families.detection.postprocess import NMSParams

    return NMSParams(conf_threshold=recipe.get("eval_conf", 0.001), iou_threshold=recipe.get("eval_iou", 0.7),
                     pre_nms_topk=30000, max_detections=300)


# -- the pipeline entry point -----------------------------------------------------------------------------------------
def build(ctx: BuildContext, recipe: dict) -> list[Artifact]:
    from scripts.detection.evaluate import evaluate, latency_ab

    t0 = time.monotonic()
    timings: dict[str, float] = {}
    seed_everything(recipe["seed"])
    setup_ultralytics(ctx.cache_dir)

    dataset = make_dataset(ctx, recipe)
    fingerprint = data_fingerprint(*dataset.files())
    timings["data"] = time.monotonic() - t0

    trained = train(ctx, recipe, dataset)
    timings["train"] = time.monotonic() - t0 - sum(timings.values())

    model = load_torch_model(trained.weights)
    labels = class_names(model)
    imgsz, fb_imgsz = int(recipe["imgsz"]), int(recipe["fallback_imgsz"])
    export_dir = ctx.work_dir / "export"
    export_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = export_onnx(trained.weights, export_dir / "model.onnx", imgsz, recipe["opset"])
    _pin_output_channels(onnx_path, len(labels))
    inputs, outputs, opset = _tensor_specs(onnx_path)
    check_graph_io(inputs, outputs, len(labels))
    timings["export"] = time.monotonic() - t0 - sum(timings.values())

    sizes = [list(s) for s in recipe["parity_sizes"]]
    for s in (imgsz, fb_imgsz):  # both served sizes are always checked
        if [s, s] not in sizes:
            sizes.append([s, s])
    parity = check_parity(model, onnx_path, sizes, recipe["parity_batches"], recipe["parity_tolerance"],
                          seed=recipe["seed"])
    timings["parity"] = time.monotonic() - t0 - sum(timings.values())

    session = ort_session(onnx_path)
    test = labelled_split(dataset, "test")
    eval_nms = eval_nms_params(recipe)
    primary = evaluate(session, test, imgsz, eval_nms=eval_nms, desc=f"test @{imgsz}")
    fallback = evaluate(session, test, fb_imgsz, eval_nms=eval_nms, desc=f"test @{fb_imgsz}")
    latency = latency_ab(session, [imgsz, fb_imgsz], runs=recipe["latency_runs"], seed=recipe["seed"])
    timings["evaluate"] = time.monotonic() - t0 - sum(timings.values())

    speedup = latency[imgsz] / max(latency[fb_imgsz], 1e-9)
    drop = primary.map50 - fallback.map50
    gates_primary = {"parity": True, "quality": primary.map50 >= recipe["min_map50"]}
    gates_fallback = {"parity": True, "cheaper": speedup >= recipe["min_speedup"],
                      "quality": drop <= recipe["max_map50_drop"]}
    log.info("detection: primary  @%d mAP50 %.4f mAP50-95 %.4f %.2f ms/img", imgsz, primary.map50,
             primary.map50_95, latency[imgsz])
    log.info("detection: fallback @%d mAP50 %.4f mAP50-95 %.4f %.2f ms/img (x%.2f faster, mAP50 drop %.4f)",
             fb_imgsz, fallback.map50, fallback.map50_95, latency[fb_imgsz], speedup, drop)
    log.info("detection: timings %s", {k: round(v, 1) for k, v in timings.items()})
    if recipe["enforce_quality"]:
        failed = {f"{PRIMARY}:{k}" for k, ok in gates_primary.items() if not ok}
        failed |= {f"{FALLBACK}:{k}" for k, ok in gates_fallback.items() if not ok}
        if failed:
            raise GateFailed(f"detection quality gates failed: {sorted(failed)} (primary mAP50 {primary.map50:.4f} "
                             f"min {recipe['min_map50']}; fallback drop {drop:.4f} max {recipe['max_map50_drop']}; "
                             f"speedup x{speedup:.2f} min x{recipe['min_speedup']})")

    packages = package_versions("torch", "ultralytics", "onnx", "onnxruntime")
    info = trained.info
    description = (f"{recipe['model']} from random init, trained by scripts/detection/build.py on synthetic shapes "
                   f"({recipe['n_train']} train images at {recipe['image_size']}px): {info['epochs']} epochs in "
                   f"{info['seconds']:.0f} s at imgsz {imgsz}")
    common = dict(version=ctx.version, task="detection", model_file="model.onnx", files=[], opset=opset,
                  inputs=inputs, outputs=outputs, labels=labels,
                  source=Source(kind="recipe", description=description, packages=packages, recipe=dict(recipe),
                                license=SHAPES_LICENSE,
                                seed=recipe["seed"]),
                  data_fingerprint=fingerprint, parity=parity, recipe_hash=ctx.recipe_hash,
                  created_at=utcnow(), git_commit=ctx.git_commit)
    m_primary = Manifest(
        name=PRIMARY, variant="primary", preprocess=DetectionPreprocess(imgsz=imgsz),
        metrics={"map50": primary.map50, "map50_95": primary.map50_95, "ms_per_image": latency[imgsz]},
        gates=gates_primary, reference=reference_distribution(primary), **common)
    m_fallback = Manifest(
        name=FALLBACK, variant="fallback", fallback_for=PRIMARY, preprocess=DetectionPreprocess(imgsz=fb_imgsz),
        metrics={"map50": fallback.map50, "map50_95": fallback.map50_95, "ms_per_image": latency[fb_imgsz],
                 "map50_drop": drop, "speedup": speedup},
        gates=gates_fallback, reference=reference_distribution(fallback), **common)

    artifacts = []
    for manifest in (m_primary, m_fallback):
        staging = ctx.staging(manifest.name)
        shutil.copy2(onnx_path, staging / "model.onnx")
        artifacts.append(Artifact(staging=staging, manifest=manifest))
    return artifacts


# -- user-supplied weights --------------------------------------------------------------------------------------------
def _default_parity_sizes(imgsz: int) -> list[list[int]]:
    half = max(32, (imgsz // 2) // 32 * 32)
    wide = (imgsz * 5 // 4 + 31) // 32 * 32
    return [[half, half], [imgsz, imgsz], [imgsz, wide]]


def _yolo_label_path(image: Path) -> Path:
    """ultralytics' convention: the last 'images' directory of the path becomes 'labels', the suffix '.txt'."""
    parts = list(image.parts)
    i = len(parts) - 1 - parts[::-1].index("images")
    return Path(*parts[:i], "labels", *parts[i + 1:]).with_suffix(".txt")


class _End2EndAsAnchors:
    """evaluate() (scripts/detection/evaluate.py) decodes anchors heads with the service's NMS. An end-to-end output
    [b, max_det, 6] is handed to it as a one-hot anchors head [b, 4 + nc, max_det] (cx, cy, w, h, then the row's
    score at its class, 0 elsewhere) and scored with NMS at IoU threshold 1.0, which never suppresses: what is left
    is the confidence filter, the score sort and the cap, i.e. families/detection/postprocess.end2end."""

    def __init__(self, session, nc: int):
        self.session, self.nc = session, nc

    def get_inputs(self):
        return self.session.get_inputs()

    def run(self, names, feeds):
        y = self.session.run(None, feeds)[0]
        b, k, _ = y.shape
        out = np.zeros((b, 4 + self.nc, k), np.float32)
        out[:, 0] = (y[..., 0] + y[..., 2]) / 2
        out[:, 1] = (y[..., 1] + y[..., 3]) / 2
        out[:, 2] = y[..., 2] - y[..., 0]
        out[:, 3] = y[..., 3] - y[..., 1]
        cls = np.clip(np.rint(y[..., 5]).astype(np.int64), 0, self.nc - 1)
        bi, ki = np.meshgrid(np.arange(b), np.arange(k), indexing="ij")
        out[bi, 4 + cls, ki] = y[..., 4]
        return [out]


def _e2e_nms(params):
    from families.detection.postprocess import NMSParams

    return NMSParams(conf_threshold=params.conf_threshold, iou_threshold=1.0, pre_nms_topk=params.pre_nms_topk,
                     max_detections=params.max_detections)


def _parity_sizes_for(model, sizes: Sequence[Sequence[int]], imgsz: int, head: str, max_det: int | None
                      ) -> list[list[int]]:
    """An end-to-end graph bakes its TopK k (max_det) in: sizes with fewer anchors than k cannot run (and are never
    served: the service letterboxes to imgsz)."""
    out = [list(s) for s in sizes]
    if head == "end2end":
        out = [s for s in out if anchor_count(model, s[0], s[1]) >= _end2end_k(max_det)]
        if [imgsz, imgsz] not in out:
            out.insert(0, [imgsz, imgsz])
    return out


def export_user_model(weights: Path, name: str, version: str, work_dir: Path, imgsz: int | None = None,
                      data: Path | None = None, split: str = "val", batches: Sequence[int] = (1, 4, 32),
                      sizes: Sequence[Sequence[int]] | None = None, tolerance: float = 1e-4,
                      cache_dir: Path | None = None, head: str = "auto", proof_batches: Sequence[int] = (4, 2),
                      description: str | None = None) -> Artifact:
    """Any ultralytics detection .pt (any classes) -> ONNX + manifest in `work_dir`/`name`, parity-gated.

    head: 'auto' (the NMS-free one-to-one branch where the head has one: YOLOv10, YOLO26; else the anchors head),
    'end2end' (required; ValueError without a one-to-one branch) or 'anchors' (also for YOLOv10/YOLO26: their
    one-to-many branch, decoded by the service's NMS). The manifest's preprocess.head says which.

    An end-to-end graph ends in TopK/GatherElements; its rows are proved independent of the batch (each row of a
    batch-4 and a batch-2 run against batch-1 runs of the same graph, order-insensitive; ParityCheck entries
    'batch{1,2,4}-vs-batch1/...'). If that proof fails the model is re-exported with a fixed batch of 1 (inputs
    [1, 3, imgsz, imgsz]): the runner then feeds it item by item (runners/pool.fixed_batch), and
    gates.dynamic_batch is False.

    With `data` (an ultralytics data yaml) the model is also scored on that split through the serving path.
    `description`: the manifest's source description (default: 'user weights ...').
    """
    from scripts.detection.evaluate import EVAL_NMS, evaluate, latency_ab, yolo_labels

    if head not in ("auto", "anchors", "end2end"):
        raise ValueError(f"head must be auto, anchors or end2end, got {head!r}")
    weights = Path(weights)
    if cache_dir is None:
        cache_dir = PIPELINE_CACHE / "detection"
    setup_ultralytics(Path(cache_dir))
    model = load_torch_model(weights)
    task = getattr(model, "task", None) or type(model).__name__
    if task not in ("detect", "DetectionModel"):
        raise ValueError(f"{weights}: only detection models are served here, got task {task!r}")
    labels = class_names(model)
    if imgsz is None:
        train_args = getattr(model, "args", {}) or {}
        imgsz = train_args.get("imgsz", 640) if isinstance(train_args, dict) else 640
        imgsz = int(max(imgsz)) if isinstance(imgsz, (list, tuple)) else int(imgsz)
    capable = end2end_capable(model)
    if head == "end2end" and not capable:
        raise ValueError(f"{weights.name}: head {type(model.model[-1]).__name__} has no one-to-one (NMS-free) "
                         f"branch; import it with head 'anchors' (or 'auto')")
    staging = Path(work_dir) / name
    staging.mkdir(parents=True, exist_ok=True)
    onnx_path = export_onnx(weights, staging / "model.onnx", imgsz, 17, end2end=head != "anchors" and capable)
    kind, shape = exported_head(onnx_path, len(labels))
    if head != "auto" and kind != head:
        raise ValueError(f"{weights.name}: asked for head {head!r} but the export has an {kind!r} head {list(shape)} "
                         f"(a checkpoint fused down to one branch exports only that one)")
    max_det = shape[1] if kind == "end2end" else None
    _pin_output_channels(onnx_path, len(labels), kind, max_det)
    inputs, outputs, opset = _tensor_specs(onnx_path)
    check_graph_io(inputs, outputs, len(labels), kind, max_det)
    if kind == "end2end":
        set_end2end(model, _end2end_k(max_det))
    parity_sizes = _parity_sizes_for(model, sizes or _default_parity_sizes(imgsz), imgsz, kind, max_det)
    parity = check_parity(model, onnx_path, parity_sizes, batches, tolerance, head=kind)

    dynamic = True
    proof_reason = ""
    if kind == "end2end":
        from scripts.importer.batching import prove_dynamic_batch
        from scripts.importer.end2end import compare_batch

        session = ort_session(onnx_path, threads=1)

        def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            return session.run(None, feeds)

        rows = parity_images(max(proof_batches), imgsz, imgsz, seed=1)
        proof = prove_dynamic_batch(run, run, "images", rows,
                                    {"boxes": (None, tolerance * imgsz), "scores": (None, tolerance)},
                                    proof_batches, compare=lambda a, b: compare_batch(a, b, tolerance))
        parity += [c.model_copy(update={"case": c.case.replace("-vs-original-batch1", "-vs-batch1")})
                   for c in proof.checks]
        if not proof.passed:
            dynamic, proof_reason = False, proof.reason
            log.warning("%s: end-to-end rows depend on the batch (%s): re-exported with a fixed batch of 1; the "
                        "runner feeds it item by item", name, proof.reason)
            export_onnx(weights, onnx_path, imgsz, 17, end2end=True, dynamic=False)
            _pin_output_channels(onnx_path, len(labels), kind, max_det)
            inputs, outputs, opset = _tensor_specs(onnx_path)
            check_graph_io(inputs, outputs, len(labels), kind, max_det, fixed_size=imgsz)
            parity = [c for c in parity if "-vs-" in c.case] + check_parity(
                model, onnx_path, [[imgsz, imgsz]], [1], tolerance, head=kind)

    session = ort_session(onnx_path)
    metrics = {"ms_per_image": latency_ab(session, [imgsz], runs=10)[imgsz]}
    reference: dict = {}
    fingerprint = sha256_file(weights)  # no data known: the weights are the version
    if data is not None:
        import yaml

        from families.detection.postprocess import NMSParams

        cfg = yaml.safe_load(Path(data).read_text())
        root = Path(cfg.get("path") or Path(data).parent)
        img_dir = root / cfg[split]
        images = sorted(p for p in img_dir.rglob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"})
        items = [yolo_labels(p, _yolo_label_path(p)) for p in images]
        if kind == "end2end":
            result = evaluate(_End2EndAsAnchors(session, len(labels)), items, imgsz, batch=16 if dynamic else 1,
                              serving_nms=_e2e_nms(NMSParams()), eval_nms=_e2e_nms(EVAL_NMS),
                              desc=f"{split} @{imgsz}")
        else:
            result = evaluate(session, items, imgsz, desc=f"{split} @{imgsz}")
        metrics.update(map50=result.map50, map50_95=result.map50_95)
        reference = reference_distribution(result)
        fingerprint = data_fingerprint(*[f for p in images for f in (p, _yolo_label_path(p))])
    wsha = sha256_file(weights)
    recipe = {"head": kind, "max_det": max_det, "dynamic_batch": dynamic, "batch_proof_reason": proof_reason,
              "parity_sizes": parity_sizes, "parity_batches": list(batches) if dynamic else [1]}
    manifest = Manifest(
        name=name, version=version, task="detection", variant="primary", model_file="model.onnx", files=[],
        opset=opset, inputs=inputs, outputs=outputs, preprocess=DetectionPreprocess(imgsz=imgsz, head=kind),
        labels=labels,
        source=Source(kind="user", description=description or (
            f"user weights {weights.name} (sha256 {wsha}) exported by scripts/detection/build.py"
            + (f" (NMS-free end-to-end head, max_det {max_det})" if kind == "end2end" else "")),
            packages=package_versions("torch", "ultralytics", "onnx", "onnxruntime"), recipe=recipe),
        data_fingerprint=fingerprint, metrics=metrics, parity=parity,
        gates={"parity": True, "dynamic_batch": dynamic}, reference=reference,
        recipe_hash=stable_hash({"weights": wsha, "imgsz": imgsz, "opset": opset, "head": kind}),
        created_at=utcnow(), git_commit=git_commit())
    return Artifact(staging=staging, manifest=manifest)


def publish_user_model(weights: Path, name: str, version: str, registry, imgsz: int | None = None,
                       data: Path | None = None, alias: str | None = None, cache_dir: Path | None = None,
                       head: str = "auto") -> Manifest:
    """export_user_model, then publish into `registry` (a models.registry.LocalRegistry) and optionally alias it."""
    work = Path(tempfile.mkdtemp(prefix="triserve-user-export-"))
    try:
        art = export_user_model(weights, name, version, work, imgsz=imgsz, data=data, cache_dir=cache_dir, head=head)
        published = registry.publish(art.staging, art.manifest)
        if alias:
            registry.set_alias(name, alias, version, by="scripts.detection.build export")
        return published
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from models.registry import LocalRegistry

    ap = argparse.ArgumentParser(prog="python -m scripts.detection.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export a user ultralytics detection .pt, gate parity, publish")
    e.add_argument("--weights", type=Path, required=True)
    e.add_argument("--name", required=True, help="registry model name, e.g. my-detector")
    e.add_argument("--version", required=True, help="immutable version, e.g. 1.0.0")
    e.add_argument("--registry", type=Path, default=Path(os.environ.get("TRISERVE_REGISTRY_DIR", LOCAL_REGISTRY)))
    e.add_argument("--imgsz", type=int, default=None, help="letterbox size (default: the checkpoint's train imgsz)")
    e.add_argument("--data", type=Path, default=None, help="ultralytics data yaml to score the model on")
    e.add_argument("--alias", default=None, help="also point this alias (e.g. canary) at the new version")
    e.add_argument("--head", choices=("auto", "anchors", "end2end"), default="auto",
                   help="auto: the NMS-free end-to-end branch of YOLOv10/YOLO26 heads, else the anchors head")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        m = publish_user_model(args.weights, args.name, args.version, LocalRegistry(args.registry), args.imgsz,
                               args.data, args.alias, cache_dir=PIPELINE_CACHE / "detection", head=args.head)
    except (GateFailed, ValueError) as exc:
        log.error("gate failed, nothing published: %s", exc)
        return 2
    print(json.dumps({"name": m.name, "version": m.version, "labels": m.labels, "metrics": m.metrics,
                      "parity_max_abs_diff": max(c.max_abs_diff for c in m.parity)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
