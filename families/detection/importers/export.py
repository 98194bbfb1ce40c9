"""An ultralytics detection checkpoint exported to ONNX and proved: the export the detection-pt importer
(checkpoint.py) and the pipeline's own detector (scripts/detection/build.py) share.

export_user_model: any ultralytics detection .pt (any classes) -> ONNX with dynamic batch and size + a manifest,
gated on parity. Parity (torch fp32 eval vs ONNX Runtime, batches 1/4/32, several sizes incl. non-square) is two
checks per case: class scores within 1e-4 absolute, and box coordinates within 1e-4 of the input's longer side
(pixels are ~3e-5 per float32 ulp at 256-512 px, and a faithful export measures up to ~7e-4 px; see check_parity).
Both are recorded. The inputs are synthetic shape scenes (scenes.py): realistic activations, not noise.

torch, ultralytics, onnx and tqdm are imported inside the functions (the export extra).
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.end2end import compare_batch, is_end2end_shape
from triserve.families.detection.importers.evaluate import (
    EVAL_NMS,
    evaluate,
    latency_ab,
    reference_distribution,
    yolo_labels,
)
from triserve.families.detection.importers.scenes import draw_image
from triserve.families.detection.importers.ultralytics_env import setup_ultralytics
from triserve.families.detection.manifest import DetectionPreprocess
from triserve.families.vision.nms import NMSParams
from triserve.models.importing import batching
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.parity import parity_gate
from triserve.models.importing.provenance import data_fingerprint, git_commit, package_versions, stable_hash
from triserve.models.importing.publish import default_cache
from triserve.models.importing.result import Artifact, GateFailed
from triserve.models.manifest import Manifest, ParityCheck, Source, TensorSpec, sha256_file, utcnow

log = logging.getLogger("triserve.importer.detection")


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


def pin_output_channels(onnx_path: Path, nc: int, head: str = "anchors", max_det: int | None = None) -> None:
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


def tensor_specs(onnx_path: Path) -> tuple[list[TensorSpec], list[TensorSpec], int]:
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

    Two checks per case, both through triserve.models.importing.parity.parity_gate:
      <case>/scores  class probabilities, max abs diff <= tolerance (1e-4)
      <case>/boxes   cx, cy, w, h in input pixels, max abs diff <= tolerance x the input's longer side
                     (1e-4 of the image side: 0.032 px at 320). float32 box coordinates in pixels carry ~3e-5
                     per ulp at 256-512, and the two runtimes accumulate conv sums in different orders, so a
                     faithful export measures 1e-4..7e-4 px here: a flat 1e-4 px bound would reject it.
    head 'end2end' ([b, max_det, 6] rows after an in-graph top-k; the torch model is switched to its one-to-one
    branch with the same k): the same two checks per case, but order-insensitive (end2end.py
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
    """evaluate() (evaluate.py) decodes anchors heads with the service's NMS. An end-to-end output
    [b, max_det, 6] is handed to it as a one-hot anchors head [b, 4 + nc, max_det] (cx, cy, w, h, then the row's
    score at its class, 0 elsewhere) and scored with NMS at IoU threshold 1.0, which never suppresses: what is left
    is the confidence filter, the score sort and the cap, i.e. families/vision/nms.end2end."""

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


def _e2e_nms(params: NMSParams) -> NMSParams:
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
    if head not in ("auto", "anchors", "end2end"):
        raise ValueError(f"head must be auto, anchors or end2end, got {head!r}")
    weights = Path(weights)
    if cache_dir is None:
        cache_dir = default_cache() / "detection"
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
    pin_output_channels(onnx_path, len(labels), kind, max_det)
    inputs, outputs, opset = tensor_specs(onnx_path)
    check_graph_io(inputs, outputs, len(labels), kind, max_det)
    if kind == "end2end":
        set_end2end(model, _end2end_k(max_det))
    parity_sizes = _parity_sizes_for(model, sizes or _default_parity_sizes(imgsz), imgsz, kind, max_det)
    parity = check_parity(model, onnx_path, parity_sizes, batches, tolerance, head=kind)

    dynamic = True
    proof_reason = ""
    if kind == "end2end":
        session = ort_session(onnx_path, threads=1)

        def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            return session.run(None, feeds)

        rows = parity_images(max(proof_batches), imgsz, imgsz, seed=1)
        proof = batching.prove_dynamic_batch(run, run, "images", rows,
                                             {"boxes": (None, tolerance * imgsz), "scores": (None, tolerance)},
                                             proof_batches, compare=lambda a, b: compare_batch(a, b, tolerance))
        parity += [c.model_copy(update={"case": c.case.replace("-vs-original-batch1", "-vs-batch1")})
                   for c in proof.checks]
        if not proof.passed:
            dynamic, proof_reason = False, proof.reason
            log.warning("%s: end-to-end rows depend on the batch (%s): re-exported with a fixed batch of 1; the "
                        "runner feeds it item by item", name, proof.reason)
            export_onnx(weights, onnx_path, imgsz, 17, end2end=True, dynamic=False)
            pin_output_channels(onnx_path, len(labels), kind, max_det)
            inputs, outputs, opset = tensor_specs(onnx_path)
            check_graph_io(inputs, outputs, len(labels), kind, max_det, fixed_size=imgsz)
            parity = [c for c in parity if "-vs-" in c.case] + check_parity(
                model, onnx_path, [[imgsz, imgsz]], [1], tolerance, head=kind)

    session = ort_session(onnx_path)
    metrics = {"ms_per_image": latency_ab(session, [imgsz], runs=10)[imgsz]}
    reference: dict = {}
    fingerprint = sha256_file(weights)  # no data known: the weights are the version
    if data is not None:
        import yaml

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
            f"user weights {weights.name} (sha256 {wsha}) exported by families/detection/importers/export.py"
            + (f" (NMS-free end-to-end head, max_det {max_det})" if kind == "end2end" else "")),
            packages=package_versions("torch", "ultralytics", "onnx", "onnxruntime"), recipe=recipe),
        data_fingerprint=fingerprint, metrics=metrics, parity=parity,
        gates={"parity": True, "dynamic_batch": dynamic}, reference=reference,
        recipe_hash=stable_hash({"weights": wsha, "imgsz": imgsz, "opset": opset, "head": kind}),
        created_at=utcnow(), git_commit=git_commit())
    return Artifact(staging=staging, manifest=manifest)
