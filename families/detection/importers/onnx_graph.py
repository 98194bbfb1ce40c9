"""Import an ultralytics-exported ONNX detector: checked, made batch-dynamic (and proved), verified, published.

    triserve import detection-onnx --model best.onnx --name my-det --version 1.0.0 \
        [--fallback-name my-det-int8] [--license SPDX]   # required when the ONNX metadata states no licence
    triserve import coco-default           # the default COCO-80 detector (coco.py: yolov8n-coco + yolov8n-coco-int8)

What is accepted: one input `images[b, 3, S, S]` float32 RGB in 0..1 and one output, either
  * an anchors head `[b, 4 + nc, anchors]` (cx, cy, w, h in input pixels, then nc sigmoid class scores):
    ultralytics' Detect head exported with nms=None (YOLOv5u/v8/v9/v11/v12, or the one-to-many branch of YOLOv10 /
    YOLO26); served with the family's capped NMS (manifest preprocess.head 'anchors'), or
  * an end-to-end head `[b, max_det, 6]` (x1, y1, x2, y2 in input pixels, score, class id): the NMS-free
    one-to-one branch of YOLOv10 / YOLO26 (ultralytics `export(nms=False)`), recognised by its shape or the
    'end2end' metadata and checked for its values (scores in [0, 1], integral class ids in [0, nc)); served with
    the family's confidence filter and cap, no NMS (manifest preprocess.head 'end2end').
Class names and the input size come from the ONNX metadata ultralytics writes (`names`: a Python dict literal,
`imgsz`), or from `--labels FILE` and `--imgsz` when the metadata lacks them. Everything else is refused with the
reason and nothing is published (ImportRefused):
  * segmentation exports (task 'segment', or output0 with 4 + nc + 32 channels beside a mask-prototype output1):
    refused, not sliced. Their box and class channels are a Detect head, but serving them as detection would publish
    a model whose masks are thrown away at every call (the 32 coefficient channels and the prototype branch still
    cost compute, and they cannot be cut out of the exported graph without surgery on ultralytics' final Concat);
    serve it with its masks through `segmentation-onnx` (families/segmentation), or import the .pt with `detection-pt`
    (which cuts the mask branch before export) for boxes only.
  * pose (task 'pose' or 4 + nc + keypoint channels), oriented boxes (task 'obb', 4 + nc + 1 channels) and
    classification (task 'classify', a [b, nc] output): other families' heads (`detection-pt` serves a pose .pt
    as detection, see docs/importers/detection_pt.md).
  * transposed heads [b, anchors, 4 + nc], fixed batches other than 1, non-square or stride-misaligned input sizes,
    class scores outside [0, 1] (no sigmoid: not an ultralytics head), [b, k, 6] outputs whose rows are not
    x1, y1, x2, y2, score, class.

Batch: a fixed-batch-1 export is rewritten (models/importing/batching.py) and the rewrite is PROVED: the rewritten
graph at batch 4 and 2, each row against a batch-1 run of the ORIGINAL graph, boxes within 1e-4 x imgsz pixels and
scores within 1e-4 (ParityCheck entries in the manifest). For an end-to-end head (TopK/GatherElements at the end) the
rows are compared order-insensitively (end2end.compare_rows: near-tied rows may come out in another order). If the
proof fails, the ORIGINAL graph is published with its fixed batch 1 in the manifest inputs and
`gates["dynamic_batch"] = False`: the runner must feed it one item at a time.

Verification against ultralytics: ultralytics' own predictor on the published ONNX file (verify.py) and triserve's
pipeline must find the same boxes on the agreement photos (ultralytics' bus.jpg and zidane.jpg, the street and
office scenes of gradio-yolov8-det, or --images): every box matched, IoU >= 0.9, score within 0.02; a disagreement
refuses the import. A model that finds nothing on those photos makes the check vacuous (logged; use --images).

Fallback (with a fallback name): static INT8 (onnxruntime quantize_static, QDQ, per-channel weights, MinMax calibration
on real photos that ship in packages, models/importing/photos.py), the Detect head's decode kept FP32 (quantize.py).
Gated on agreement with the FP32 graph on held-out photos and on one-core latency (FALLBACK_GATES); if it fails, a
second INT8 attempt also keeps the head's last convolutions FP32; then the FP32 graph at a smaller letterbox size, but
only where the graph has dynamic height/width: a fixed export bakes the anchor count (8400 at 640) into Reshape
constants and anchor tables, and that is refused rather than patched (an end-to-end graph also bakes its top-k k).
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from families.detection.importers.end2end import check_values as check_end2end_values
from families.detection.importers.end2end import compare_batch, is_end2end_shape
from families.detection.importers.evaluate import detection_references
from families.detection.importers.pipeline import letterboxed, nms_params, run_detector
from families.detection.importers.quantize import quantize_int8
from families.detection.manifest import DetectionPreprocess
from models.importing import batching
from models.importing.agreement import Agreement, Dets, agreement
from models.importing.graphs import (
    io_specs,
    metadata_literal,
    opset_of,
    ort_session,
    read_export,
    time_interleaved,
    value_dims,
)
from models.importing.labels import names_list, read_labels
from models.importing.licenses import add_license_option, resolve_license, spdx_from_text
from models.importing.photos import PhotoSet, package_photos, read_rgb, user_photos
from models.importing.provenance import data_fingerprint, git_commit, package_versions, source_digest, stable_hash
from models.importing.publish import add_registry_option, default_cache, import_and_publish, print_result, run_cli
from models.importing.result import Artifact, GateFailed, ImportRefused, ImportResult
from models.manifest import Manifest, Source, sha256_file, utcnow

log = logging.getLogger("triserve.importer")

# the code that makes a detection import (part of its recipe hash): this folder and the generic machinery
CODE = (Path(__file__).resolve().parent, Path(batching.__file__).resolve().parent)


@dataclass(frozen=True)
class ImportParams:
    """Tolerances and gates of an import (part of the recipe hash, recorded in the manifest)."""

    proof_batches: tuple[int, ...] = (4, 2)
    box_tolerance_rel: float = 1e-4  # x imgsz, in pixels (float32 pixel coordinates carry ~3e-5 per ulp at 640)
    score_tolerance: float = 1e-4
    serving_conf: float = 0.25  # NMSParams defaults: what the service applies, used for references and agreement
    serving_iou: float = 0.45
    # ultralytics cross-check: its predict defaults (conf 0.25, iou 0.7, max_det 300)
    ultralytics_conf: float = 0.25
    ultralytics_iou: float = 0.7
    ultralytics_min_iou: float = 0.9
    ultralytics_max_score_diff: float = 0.02
    latency_repeats: int = 9
    fallback_sizes: tuple[int, ...] = (416, 320)


PARAMS = ImportParams()


@dataclass(frozen=True)
class FallbackGates:
    """What a cheaper variant must keep of the FP32 primary, on held-out photos (measured numbers in the manifest).

    Measured for yolov8n-coco (6 held-out photos, 78 FP32 boxes): INT8 with the decode kept FP32 reaches share 0.92,
    mean IoU 0.95, every confident box kept, 2x faster on one core; quantising the decode too finds no box at all.
    The bars leave room for calibration noise, not for a broken graph. Boxes near the 0.25 threshold flip either
    way under INT8 (their scores move by a quantisation step), which is why share is not asked to be ~1.
    """

    min_iou: float = 0.5  # a matched pair: same class, IoU >= 0.5
    # fewer FP32 boxes than this on the agreement photos and there is nothing to judge a variant on: refused (a
    # license-plate model finds ~1 box on the package photos; give it --images of its own domain)
    min_reference_boxes: int = 10
    min_share: float = 0.85  # 2 x matched / (FP32 boxes + INT8 boxes)
    min_mean_iou: float = 0.85
    min_confident_recall: float = 0.9  # FP32 boxes with score >= 0.5 the variant still finds
    min_speedup: float = 1.2  # one-core batch-1 median latency, FP32 / variant
    # the smaller-size FP32 fallback loses small objects by design: only its confident boxes are held to a bar
    min_size_confident_recall: float = 0.75
    min_size_share: float = 0.5


FALLBACK_GATES = FallbackGates()


# -- reading the file -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DetectorInfo:
    path: Path
    sha256: str
    input_name: str
    output_name: str
    imgsz: int
    labels: list[str]
    batch: int | str  # 1, or the symbolic name of an already dynamic batch axis
    dynamic_spatial: bool  # height/width symbolic (any size), rather than fixed at imgsz
    opset: int
    head_shape: tuple[int, ...]  # output0 at batch 1, imgsz
    metadata: dict[str, str]
    labels_from: str  # 'metadata' or 'labels file'
    head: str = "anchors"  # 'anchors' [b, 4 + nc, anchors] or 'end2end' [b, max_det, 6] (manifest preprocess.head)


def square_input_size(name: str, h: int | str | None, w: int | str | None, imgsz: int | None,
                      meta: Mapping[str, str]) -> int:
    """The square size a YOLO export letterboxes to: fixed graph dims, else --imgsz, else the 'imgsz' metadata
    (which must be square when present); a multiple of the model's stride (metadata, default 32). The rule of every
    YOLO family's ONNX importer (pose and segmentation build on it)."""
    meta_size = None
    if "imgsz" in meta:
        v = metadata_literal(meta, "imgsz")
        v = list(v) if isinstance(v, (list, tuple)) else [v, v]
        if len(v) != 2 or v[0] != v[1]:
            raise ImportRefused(f"{name}: metadata imgsz {v} is not square; the YOLO families letterbox to a square "
                                f"input")
        meta_size = int(v[0])
    if isinstance(h, int) and isinstance(w, int):
        if h != w:
            raise ImportRefused(f"{name}: input {h}x{w} is not square; the YOLO families letterbox to a square input")
        if imgsz is not None and int(imgsz) != h:
            raise ImportRefused(f"{name}: --imgsz {imgsz} but the graph input is fixed at {h}x{w}")
        size = int(h)
    elif imgsz is not None:
        size = int(imgsz)
    elif meta_size is not None:
        size = meta_size
    else:
        raise ImportRefused(f"{name}: the input size is dynamic and there is no 'imgsz' metadata; pass --imgsz N")
    stride = int(metadata_literal(meta, "stride")) if "stride" in meta else 32
    if size <= 0 or size % stride:
        raise ImportRefused(f"{name}: imgsz {size} is not a multiple of the model stride {stride}")
    return size


def inspect_detector(path: Path, labels: Sequence[str] | None = None, imgsz: int | None = None) -> DetectorInfo:
    """Read and check an ultralytics detection export; ImportRefused (with the reason) for anything else."""
    import onnx

    path = Path(path)
    model, meta = read_export(path)
    task = meta.get("task", "").strip().lower()
    refusals = {
        "segment": "segmentation model (metadata task 'segment'): output0 carries 32 mask coefficients per anchor "
                   "and output1 the mask prototypes; the detection family serves box heads only (import it with "
                   "segmentation-onnx to serve its masks, or the .pt with detection-pt, which cuts the mask branch)",
        "pose": "pose model (metadata task 'pose'): output0 carries keypoints after the class scores; not a "
                "detection head (import the .pt with detection-pt, which serves its boxes and cuts the keypoints)",
        "obb": "oriented-box model (metadata task 'obb'): output0 carries a rotation angle; not an axis-aligned "
               "detection head",
        "classify": "classification model (metadata task 'classify'): no boxes",
    }
    if task in refusals:
        raise ImportRefused(f"{path.name}: {refusals[task]}")
    if task and task != "detect":
        raise ImportRefused(f"{path.name}: metadata task {task!r} is not 'detect'")

    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    if len(inputs) != 1:
        raise ImportRefused(f"{path.name}: expected one input (images[b,3,S,S]), got {[v.name for v in inputs]}")
    inp = inputs[0]
    dims = value_dims(inp)
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or len(dims) != 4 or dims[1] != 3:
        raise ImportRefused(f"{path.name}: input {inp.name} must be float32 [b, 3, S, S], got "
                            f"{onnx.TensorProto.DataType.Name(inp.type.tensor_type.elem_type)} {dims}")
    batch = dims[0]
    if isinstance(batch, int) and batch != 1:
        raise ImportRefused(f"{path.name}: fixed batch {batch}: only batch-1 or dynamic-batch exports are imported "
                            f"(re-export with batch=1 or dynamic=True)")
    if batch is None:
        batch = "batch"

    # labels: the caller's file wins; else ultralytics' 'names' metadata
    meta_names = names_list(metadata_literal(meta, "names"), "ONNX metadata 'names'") if "names" in meta else None
    if labels is not None:
        labels = [str(x) for x in labels]
        if meta_names is not None and len(meta_names) != len(labels):
            raise ImportRefused(f"{path.name}: the labels file has {len(labels)} classes but the ONNX metadata "
                                f"names {len(meta_names)}")
        labels_from = "labels file"
    elif meta_names is not None:
        labels, labels_from = meta_names, "metadata"
    else:
        raise ImportRefused(f"{path.name}: no class names: the ONNX has no 'names' metadata (not exported by "
                            f"ultralytics, or stripped); pass --labels FILE (one name per line, class-id order)")
    nc = len(labels)

    h, w = dims[2], dims[3]
    dynamic_spatial = not (isinstance(h, int) and isinstance(w, int))
    size = square_input_size(path.name, h, w, imgsz, meta)

    opset = int(next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0))
    # the head, as the graph really computes it (symbolic output dims say nothing): one probe run at batch 1
    try:
        session = ort_session(path, threads=1)
        probe = np.full((1, 3, size, size), 114 / 255.0, np.float32)
        outs = session.run(None, {inp.name: probe})
    except Exception as exc:
        raise ImportRefused(f"{path.name}: ONNX Runtime cannot run it at 1x3x{size}x{size}: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    shapes = [tuple(o.shape) for o in outs]
    head = shapes[0]
    if len(outs) == 2 and len(head) == 3 and head[1] == 4 + nc + 32 and len(shapes[1]) == 4 and shapes[1][1] == 32:
        raise ImportRefused(f"{path.name}: segmentation model: output0 {list(head)} has 4 + {nc} + 32 channels (the "
                            f"last 32 are mask coefficients) and output1 {list(shapes[1])} holds the mask "
                            f"prototypes; the detection family serves box heads only (import it with "
                            f"segmentation-onnx to serve its masks, or the .pt with detection-pt, which cuts the "
                            f"mask branch)")
    if len(outs) != 1:
        raise ImportRefused(f"{path.name}: expected one output [b, 4+nc, anchors] or [b, max_det, 6], got "
                            f"{len(outs)}: {shapes}")
    if len(head) == 2:
        raise ImportRefused(f"{path.name}: output {list(head)} has no anchors axis: a classification head")
    if len(head) != 3:
        raise ImportRefused(f"{path.name}: output {list(head)}: expected [b, 4+{nc}, anchors]")
    meta_e2e = meta.get("end2end", "").strip().lower() == "true"
    if is_end2end_shape(head, nc) or (meta_e2e and head[2] == 6):
        # [b, max_det, 6]: x1, y1, x2, y2 (input pixels), score, class; a YOLOv10/YOLO26 one-to-one head (or an
        # in-graph NMS export): the service only filters by confidence and caps (postprocess.end2end)
        problem = check_end2end_values(outs[0], nc)
        if problem:
            raise ImportRefused(f"{path.name}: output {list(head)} has the end-to-end layout [b, max_det, 6] but is "
                                f"not ultralytics' x1, y1, x2, y2, score, class rows: {problem}")
        return DetectorInfo(path=path, sha256=sha256_file(path), input_name=inp.name,
                            output_name=session.get_outputs()[0].name, imgsz=size, labels=list(labels), batch=batch,
                            dynamic_spatial=dynamic_spatial, opset=opset, head_shape=tuple(int(x) for x in head),
                            metadata=meta, labels_from=labels_from, head="end2end")
    if head[2] == 6 and head[1] != 4 + nc:  # not reached: is_end2end_shape took it
        raise ImportRefused(f"{path.name}: output {list(head)}")
    if head[2] == 4 + nc and head[1] != 4 + nc:
        raise ImportRefused(f"{path.name}: transposed head {list(head)} ([b, anchors, 4+nc]); expected "
                            f"[b, 4+{nc}, anchors] as ultralytics exports it")
    if head[1] != 4 + nc:
        extra = head[1] - 4 - nc
        kind = ""
        if extra == 32:
            kind = " (32 extra channels: segmentation mask coefficients)"
        elif extra == 1:
            kind = " (1 extra channel: an oriented-box angle)"
        elif "kpt_shape" in meta or (extra > 0 and extra % 3 == 0):
            kind = " (extra channels look like pose keypoints)"
        raise ImportRefused(f"{path.name}: output0 {list(head)} has {head[1]} channels, expected 4 + {nc} classes = "
                            f"{4 + nc}{kind}")
    scores = outs[0][0, 4:]
    if scores.size and (not np.isfinite(outs[0]).all() or scores.min() < -1e-3 or scores.max() > 1 + 1e-3):
        raise ImportRefused(f"{path.name}: class scores outside [0, 1] (range {scores.min():.3g}..{scores.max():.3g}): "
                            f"the head has no sigmoid; not an ultralytics Detect export")
    return DetectorInfo(path=path, sha256=sha256_file(path), input_name=inp.name,
                        output_name=session.get_outputs()[0].name, imgsz=size, labels=list(labels), batch=batch,
                        dynamic_spatial=dynamic_spatial, opset=opset, head_shape=tuple(int(x) for x in head),
                        metadata=meta, labels_from=labels_from)


# -- helpers ----------------------------------------------------------------------------------------------------------
def _runner(session):
    return lambda feeds: session.run(None, feeds)


def _proof_parts(info: DetectorInfo, params: ImportParams):
    """(parts, compare) for batching.prove_dynamic_batch: channel slices of an anchors head; for an end-to-end head
    the order-insensitive row comparison of end2end.compare_batch (near-tied rows may come out in another order)."""
    box_tol = params.box_tolerance_rel * info.imgsz
    if info.head == "end2end":
        return ({"boxes": (None, box_tol), "scores": (None, params.score_tolerance)},
                lambda ref, got: compare_batch(ref, got, params.score_tolerance))
    return {"boxes": (slice(0, 4), box_tol), "scores": (slice(4, None), params.score_tolerance)}, None


def _pin_batch_one(src: Path, dst: Path) -> None:
    """A dynamic-batch graph that failed the proof: its IO says batch 1, as the manifest does."""
    import onnx

    model = onnx.load(str(src))
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_param"):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    onnx.save(model, str(dst))


def _latency(paths: dict[str, Path], feeds: dict[str, dict[str, np.ndarray]], repeats: int) -> dict:
    """One-core batch-1 latency, interleaved (models/importing/graphs.time_interleaved)."""
    return time_interleaved(paths, feeds, threads=1, warmup=2, repeats=repeats, min_sample_ms=50.0)


def _finite_same_io(base: Path, variant: Path, feed: dict[str, np.ndarray]) -> list[str]:
    problems = []
    if io_specs(base) != io_specs(variant):
        problems.append("graph IO differs from the FP32 graph")
    y = ort_session(variant, threads=1).run(None, feed)[0]
    if not np.isfinite(y).all():
        problems.append(f"{int((~np.isfinite(y)).sum())} non-finite outputs")
    return problems


# -- the import -------------------------------------------------------------------------------------------------------
@dataclass
class _Photos:
    """Decoded photos, by role."""

    agreement: list[np.ndarray]
    agreement_names: list[str]
    calibration: list[np.ndarray]
    verify: list[Path]  # the agreement photos (ultralytics' bus.jpg and zidane.jpg first, when present)


def _proof_rows(images: list[np.ndarray], pre: DetectionPreprocess, n: int) -> np.ndarray:
    """n distinct letterboxed inputs (a row mixed up with another must show): the photos, then, when there are too
    few, their mirror images, negatives and mirrored negatives."""
    base, _ = letterboxed(images[:n], pre)
    rows = [base]
    for make in (lambda r: r[..., ::-1], lambda r: 1.0 - r, lambda r: (1.0 - r)[..., ::-1]):
        if sum(len(r) for r in rows) >= n:
            break
        rows.append(np.ascontiguousarray(make(base)))
    return np.concatenate(rows)[:n]


def _decode(photos: PhotoSet) -> _Photos:
    if not photos.agreement:
        raise GateFailed("no agreement photos: need ultralytics' assets, the photo wheels or --images DIR")
    agree = [read_rgb(p.path) for p in photos.agreement]
    cal = [read_rgb(p.path) for p in photos.calibration]
    if photos.overlap:  # calibrating on the judged photos: at least not on the same pixels
        cal = [np.ascontiguousarray(img[:, ::-1]) for img in cal]
    return _Photos(agree, [p.name for p in photos.agreement], cal, [p.path for p in photos.agreement])


def import_detection_onnx(model_path: Path, name: str, version: str, work_dir: Path, *,
                          labels: Sequence[str] | None = None, imgsz: int | None = None,
                          photos: PhotoSet | None = None, cache_dir: Path | None = None,
                          source: Source | None = None, fallback_name: str | None = None,
                          require_fallback: bool = False, verify_ultralytics: bool | None = None,
                          params: ImportParams = PARAMS, gates: FallbackGates = FALLBACK_GATES,
                          recipe_hash: str | None = None, license: str | None = None,
                          require_license: bool = False) -> ImportResult:
    """Check, rewrite, prove, verify and describe an ultralytics ONNX detector; artifacts staged under `work_dir`.

    `photos`: calibration/agreement photos (default: the package photos, downloaded into `cache_dir`).
    `verify_ultralytics`: None = when ultralytics is installed; True = required; False = skipped (recorded).
    `require_fallback`: with `fallback_name`, a fallback that fails every attempt raises GateFailed.
    `license`: SPDX expression of the weights (else the ONNX metadata's `license`, else NOASSERTION, or
    LicenseRequired with `require_license`: models/importing/licenses.py); it overrides a given `source`'s.
    """
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def lap(key: str) -> None:
        timings[key] = round(time.monotonic() - t0 - sum(timings.values()), 2)

    model_path = Path(model_path)
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    info = inspect_detector(model_path, labels=labels, imgsz=imgsz)
    weights_license = resolve_license(license, spdx_from_text(info.metadata.get("license")), model_path.name,
                                      required=require_license and source is None)
    pre = DetectionPreprocess(imgsz=info.imgsz, letterbox=True, pad_value=114, color_order="RGB", scale=1 / 255.0,
                              head=info.head)
    photos = photos if photos is not None else package_photos(cache_dir)
    imgs = _decode(photos)
    lap("inspect+photos")

    # 1. batch: rewrite, prove against the original, or keep the original at batch 1
    import onnx

    work_dir = Path(work_dir)
    staging = work_dir / name
    staging.mkdir(parents=True, exist_ok=True)
    served = staging / "model.onnx"
    candidate = work_dir / f"{name}.dynamic.onnx"
    rewrite = batching.Rewrite()
    rewrite_error = ""
    try:
        rewritten, rewrite = batching.make_batch_dynamic(onnx.load(str(model_path)))
        rewritten.metadata_props.add(key="triserve_batch", value="dynamic (models/importing/batching.py)")
        batching.save(rewritten, candidate)
    except Exception as exc:  # noqa: BLE001  # a failed rewrite means: serve the original, unbatched
        rewrite_error = f"rewrite failed: {type(exc).__name__}: {exc}"
    rows = _proof_rows(imgs.agreement + imgs.calibration, pre, max(params.proof_batches))
    parts, compare = _proof_parts(info, params)
    original = ort_session(model_path, threads=1)
    if rewrite_error:
        proof = batching.BatchProof(False, [], rewrite_error)
    else:
        try:
            rewritten_session = ort_session(candidate, threads=1)
        except Exception as exc:  # noqa: BLE001  # a rewrite ONNX Runtime cannot load fails the proof
            proof = batching.BatchProof(False, [], f"rewritten graph does not load: {type(exc).__name__}: {exc}")
        else:
            proof = batching.prove_dynamic_batch(_runner(original), _runner(rewritten_session), info.input_name,
                                                 rows, parts, params.proof_batches, compare=compare)
    dynamic = proof.passed
    if dynamic:
        shutil.copy2(candidate, served)
    elif isinstance(info.batch, str):
        _pin_batch_one(model_path, served)
    else:
        shutil.copy2(model_path, served)
    if not dynamic:
        log.warning("%s: batch proof failed (%s): published with fixed batch 1; the runner must feed it one item at "
                    "a time", name, proof.reason)
    lap("batch")

    # 2. the served graph through triserve's pipeline: references, latency, ultralytics cross-check
    session = ort_session(served, threads=1)
    serving = nms_params(params.serving_conf, params.serving_iou, max_det=100, topk=1000)  # NMSParams() defaults
    batch = 4 if dynamic else 1
    fp32_agree = run_detector(session, imgs.agreement, pre, serving, batch=batch)
    fp32_cal = run_detector(session, imgs.calibration, pre, serving, batch=batch)
    feed = {info.input_name: letterboxed(imgs.agreement[:1], pre)[0]}
    lap("detect")

    ultra = None
    if verify_ultralytics is not False:
        from families.detection.importers.verify import ultralytics_available, verify_against_ultralytics

        if ultralytics_available():
            ultra = verify_against_ultralytics(served, imgs.verify, pre, info.labels, cache_dir=cache_dir,
                                               conf=params.ultralytics_conf, iou=params.ultralytics_iou,
                                               min_iou=params.ultralytics_min_iou,
                                               max_score_diff=params.ultralytics_max_score_diff)
            if not ultra.passed:
                raise GateFailed(f"{name}: triserve's pipeline disagrees with ultralytics' predictor on the same "
                                 f"file: {ultra.describe()}")
            if ultra.agreement.reference_boxes == 0:
                log.warning("%s: ultralytics found no box on the %d agreement photos: the cross-check is vacuous; "
                            "pass --images with photos of the model's own domain", name, len(imgs.verify))
        elif verify_ultralytics:
            raise GateFailed("ultralytics is not installed: cannot verify against its predictor")
    lap("ultralytics")

    inputs, outputs = io_specs(served)
    metadata_license = info.metadata.get("license", "not stated in the ONNX metadata")
    if source is None:
        source = Source(kind="user", description=(
            f"user ONNX {model_path.name} (sha256 {info.sha256}), ultralytics export "
            f"{info.metadata.get('version', '?')} ({info.metadata.get('description', 'no description')}); weights "
            f"license per the ONNX metadata: {metadata_license}. Imported by "
            f"families/detection/importers/onnx_graph.py"),
            license=weights_license, packages=package_versions("onnx", "onnxruntime", "ultralytics"))
    elif license:
        source = source.model_copy(update={"license": weights_license})
    recipe = {
        "importer": "families/detection/importers/onnx_graph.py", "source_sha256": info.sha256, "opset": info.opset,
        "labels_from": info.labels_from, "onnx_metadata": {k: v for k, v in info.metadata.items() if k != "names"},
        "batch_rewrite": {**rewrite.as_dict(), "proved": dynamic, "reason": proof.reason},
        "params": asdict(params), "photos": photos.describe(),
    }
    recipe_hash = recipe_hash or stable_hash({"source": info.sha256, "labels": info.labels, "imgsz": info.imgsz,
                                              "params": asdict(params), "code": source_digest(CODE)})
    primary_metrics = {"batch_proof_max_abs_diff_boxes": proof.worst.get("boxes", 0.0),
                       "batch_proof_max_abs_diff_scores": proof.worst.get("scores", 0.0),
                       "photos": float(len(fp32_agree) + len(fp32_cal)),
                       "boxes_per_photo": float(np.mean([len(d) for d in fp32_agree + fp32_cal]))}
    primary_gates = {"dynamic_batch": dynamic, "batch_proof": proof.passed}
    if ultra is not None:
        primary_metrics.update(ultra.metrics())
        primary_gates["ultralytics_agreement"] = ultra.passed
    report = {"name": name, "version": version, "imgsz": info.imgsz, "classes": len(info.labels),
              "dynamic_batch": dynamic, "batch_rewrite": rewrite.as_dict(), "batch_proof_reason": proof.reason,
              "batch_proof": {c.case: c.max_abs_diff for c in proof.checks},
              "ultralytics": ultra.report() if ultra is not None else "skipped",
              "photos_missing": photos.missing}

    # 3. the fallback
    fallback_art = None
    fb_metrics: dict[str, float] = {}
    if fallback_name:
        fb = _build_fallback(served, info, pre, imgs, fp32_agree, feed, work_dir / "fallback", params, gates,
                             dynamic, rows)
        report["fallback_attempts"] = fb["attempts"]
        lap("fallback")
        if fb["chosen"] is None:
            msg = f"{name}: no fallback passed its gates: {[a['reason'] for a in fb['attempts']]}"
            if require_fallback:
                raise GateFailed(msg)
            log.warning(msg)
        else:
            chosen = fb["chosen"]
            fb_staging = work_dir / fallback_name
            fb_staging.mkdir(parents=True, exist_ok=True)
            shutil.copy2(chosen["path"], fb_staging / "model.onnx")
            fb_inputs, fb_outputs = io_specs(fb_staging / "model.onnx")
            fb_metrics = chosen["metrics"]
            fb_pre = DetectionPreprocess(imgsz=chosen["imgsz"])
            fb_sess = ort_session(fb_staging / "model.onnx", threads=1)
            fb_dets = (run_detector(fb_sess, imgs.agreement, fb_pre, serving, batch=batch)
                       + run_detector(fb_sess, imgs.calibration, fb_pre, serving, batch=batch))
            fb_source = source.model_copy(update={
                "description": f"{source.description}. Fallback: {chosen['method']['summary']}",
                "recipe": {**recipe, "fallback": chosen["method"]},
                "packages": {**source.packages, **package_versions("onnxruntime")}})
            fallback_art = Artifact(staging=fb_staging, manifest=Manifest(
                name=fallback_name, version=version, task="detection", variant="fallback", fallback_for=name,
                model_file="model.onnx", files=[], opset=opset_of(fb_staging / "model.onnx"), inputs=fb_inputs,
                outputs=fb_outputs, preprocess=fb_pre, labels=info.labels, source=fb_source,
                data_fingerprint=data_fingerprint(model_path, *[p.path for p in photos.calibration]),
                metrics=fb_metrics, parity=[], gates=chosen["gates"], reference=detection_references(fb_dets),
                recipe_hash=stable_hash({"primary": recipe_hash, "fallback": chosen["method"]}),
                created_at=utcnow(), git_commit=git_commit()))
            report["fallback"] = {"name": fallback_name, "method": chosen["method"]["summary"], **fb_metrics}
    if fb_metrics.get("fp32_ms_per_image"):
        primary_metrics["ms_per_image"] = fb_metrics["fp32_ms_per_image"]
    else:
        lat = _latency({"fp32": served}, {"b1": feed}, params.latency_repeats)
        primary_metrics["ms_per_image"] = lat["fp32"]["b1"]["median"]
    lap("latency")

    primary = Manifest(
        name=name, version=version, task="detection", variant="primary", model_file="model.onnx", files=[],
        opset=opset_of(served), inputs=inputs, outputs=outputs, preprocess=pre, labels=info.labels,
        source=source.model_copy(update={"recipe": {**source.recipe, **recipe}}),
        data_fingerprint=data_fingerprint(model_path), metrics=primary_metrics, parity=proof.checks,
        gates=primary_gates, reference=detection_references(fp32_agree + fp32_cal), recipe_hash=recipe_hash,
        created_at=utcnow(), git_commit=git_commit())
    report["primary_metrics"] = primary_metrics
    report["timings_s"] = timings
    return ImportResult(Artifact(staging=staging, manifest=primary), fallback_art, report)


def _build_fallback(served: Path, info: DetectorInfo, pre: DetectionPreprocess, imgs: _Photos,
                    fp32_agree: list[Dets], feed: dict, work: Path, params: ImportParams, gates: FallbackGates,
                    dynamic: bool, rows: np.ndarray) -> dict:
    """Try INT8 (decode FP32), INT8 (decode + last convs FP32), then FP32 at smaller sizes; first passing wins."""
    work.mkdir(parents=True, exist_ok=True)
    reference_boxes = sum(len(d) for d in fp32_agree)
    if reference_boxes < gates.min_reference_boxes:  # no variant can be judged: do not build any
        return {"attempts": [{"method": "any", "passed": False, "reason": (
            f"only {reference_boxes} FP32 boxes on the {len(fp32_agree)} agreement photos (min "
            f"{gates.min_reference_boxes}): nothing to judge a cheaper variant on; pass --images with photos of the "
            f"model's own domain")}], "chosen": None}
    serving = nms_params(params.serving_conf, params.serving_iou, max_det=100, topk=1000)
    cal_x, _ = letterboxed(imgs.calibration, pre)
    cal_x = np.concatenate([cal_x, cal_x[:, :, :, ::-1]])  # and their mirror images
    cal_feeds = [{info.input_name: cal_x[i:i + 1]} for i in range(len(cal_x))]
    attempts: list[dict] = []

    def judge(agree: Agreement, speedup: float, size_variant: bool) -> tuple[dict[str, bool], list[str]]:
        ok = {"cheaper": speedup >= gates.min_speedup,
              "agreement_evidence": agree.reference_boxes >= gates.min_reference_boxes}
        bars: tuple[float | str, float | str, float]  # share, mean IoU ("-": not gated), confident recall
        if size_variant:
            ok["agreement"] = (agree.share >= gates.min_size_share
                               and agree.confident_recall >= gates.min_size_confident_recall)
            bars = (gates.min_size_share, "-", gates.min_size_confident_recall)
        else:
            ok["agreement"] = (agree.share >= gates.min_share and agree.mean_iou >= gates.min_mean_iou
                               and agree.confident_recall >= gates.min_confident_recall)
            bars = (gates.min_share, gates.min_mean_iou, gates.min_confident_recall)
        why = []
        if not ok["cheaper"]:
            why.append(f"speedup x{speedup:.2f} < x{gates.min_speedup}")
        if not ok["agreement_evidence"]:
            why.append(f"only {agree.reference_boxes} FP32 boxes on the agreement photos (min "
                       f"{gates.min_reference_boxes}): nothing to judge on; use photos of the model's domain")
        if not ok["agreement"]:
            why.append(f"agreement share {agree.share:.3f} (min {bars[0]}), mean IoU {agree.mean_iou:.3f} "
                       f"(min {bars[1]}), confident recall {agree.confident_recall:.3f} (min {bars[2]})")
        return ok, why

    for keep in ("decode", "decode+last-convs"):
        path = work / f"int8-{keep.replace('+', '-')}.onnx"
        started = time.monotonic()
        try:
            method = quantize_int8(served, path, cal_feeds, work / f"q-{keep.replace('+', '-')}", keep)
        except Exception as exc:  # noqa: BLE001  # a quantiser failure is a refused attempt, not a crash
            attempts.append({"method": f"int8-qdq keep {keep} FP32", "passed": False,
                             "reason": f"quantize_static failed: {type(exc).__name__}: {exc}"})
            continue
        quant_s = time.monotonic() - started
        problems = _finite_same_io(served, path, feed)
        q = ort_session(path, threads=1)
        dets = run_detector(q, imgs.agreement, pre, serving, batch=4 if dynamic else 1)
        agree = agreement(fp32_agree, dets, imgs.agreement_names, min_iou=gates.min_iou)
        lat = _latency({"fp32": served, "int8": path}, {"b1": feed}, params.latency_repeats)
        fp32_ms, q_ms = lat["fp32"]["b1"]["median"], lat["int8"]["b1"]["median"]
        speedup = fp32_ms / max(q_ms, 1e-9)
        ok, why = judge(agree, speedup, size_variant=False)
        ok["finite_same_io"] = not problems
        why += problems
        # batching: rows of the INT8 graph at batch 4 vs the same graph at batch 1
        batch_diff = {"boxes": 0.0, "scores": 0.0}
        if dynamic:
            q_parts, q_compare = _proof_parts(info, params)
            proof = batching.prove_dynamic_batch(_runner(q), _runner(q), info.input_name, rows, q_parts,
                                                 (max(params.proof_batches),), compare=q_compare)
            batch_diff = proof.worst
            ok["dynamic_batch"] = proof.passed
            if not proof.passed:
                why.append(f"INT8 rows differ across batch sizes: {proof.reason}")
        else:
            ok["dynamic_batch"] = False  # the FP32 graph is served unbatched; so is this one
        metrics = {**agree.metrics("fp32_agreement"), "fp32_agreement_min_iou": gates.min_iou,
                   "fp32_ms_per_image": fp32_ms, "ms_per_image": q_ms, "speedup_vs_fp32": speedup,
                   "int8_batch_rows_max_abs_diff_boxes": batch_diff.get("boxes", 0.0),
                   "int8_batch_rows_max_abs_diff_scores": batch_diff.get("scores", 0.0),
                   "quantize_seconds": quant_s}
        required = [k for k in ok if k != "dynamic_batch" or dynamic]
        passed = all(ok[k] for k in required)
        method["summary"] = (f"static INT8 (QDQ, per-channel, MinMax on {len(cal_feeds)} letterboxed package "
                             f"photos incl. mirrors), {keep} kept FP32")
        attempts.append({"method": f"int8-qdq keep {keep} FP32", "passed": passed, "reason": "; ".join(why),
                         "metrics": metrics, "per_image": agree.per_image})
        log.info("fallback int8 (%s FP32): share %.3f mean IoU %.3f confident recall %.3f, %.1f vs %.1f ms (x%.2f)%s",
                 keep, agree.share, agree.mean_iou, agree.confident_recall, q_ms, fp32_ms, speedup,
                 "" if passed else f": refused ({'; '.join(why)})")
        if passed:
            return {"attempts": attempts, "chosen": {"path": path, "imgsz": info.imgsz, "metrics": metrics,
                                                     "gates": ok,
                                                     "method": method}}

    # smaller letterbox, same FP32 graph: only where height/width are dynamic
    if not info.dynamic_spatial:
        attempts.append({"method": "fp32 smaller imgsz", "passed": False, "reason": (
            f"input fixed at {info.imgsz}x{info.imgsz}: the anchor count ({info.head_shape[2]}) is baked into Reshape "
            f"constants and anchor/stride tables; re-export with dynamic=True for a smaller-size fallback")})
        return {"attempts": attempts, "chosen": None}
    sess = ort_session(served, threads=1)
    for size in [s for s in params.fallback_sizes if s < info.imgsz]:
        small = DetectionPreprocess(imgsz=size)
        bad = _runs_at_size(sess, info, size, dynamic, params)
        if bad:
            attempts.append({"method": f"fp32 imgsz {size}", "passed": False, "reason": bad})
            continue
        dets = run_detector(sess, imgs.agreement, small, serving, batch=4 if dynamic else 1)
        agree = agreement(fp32_agree, dets, imgs.agreement_names, min_iou=gates.min_iou)
        small_feed = {info.input_name: letterboxed(imgs.agreement[:1], small)[0]}
        lat = _latency({"fp32": served}, {"big": feed, "small": small_feed}, params.latency_repeats)
        fp32_ms, s_ms = lat["fp32"]["big"]["median"], lat["fp32"]["small"]["median"]
        speedup = fp32_ms / max(s_ms, 1e-9)
        ok, why = judge(agree, speedup, size_variant=True)
        ok["dynamic_batch"] = dynamic
        metrics = {**agree.metrics("fp32_agreement"), "fp32_agreement_min_iou": gates.min_iou,
                   "fp32_ms_per_image": fp32_ms, "ms_per_image": s_ms, "speedup_vs_fp32": speedup}
        passed = ok["cheaper"] and ok["agreement"] and ok["agreement_evidence"]
        attempts.append({"method": f"fp32 imgsz {size}", "passed": passed, "reason": "; ".join(why),
                         "metrics": metrics})
        if passed:
            return {"attempts": attempts, "chosen": {
                "path": served, "imgsz": size, "metrics": metrics, "gates": ok,
                "method": {"tool": "same FP32 graph", "imgsz": size,
                           "summary": f"the same FP32 graph at letterbox {size} (dynamic height/width)"}}}
    return {"attempts": attempts, "chosen": None}


def _runs_at_size(session, info: DetectorInfo, size: int, dynamic: bool, params: ImportParams) -> str:
    """'' when the graph really runs at `size`: no error, anchors scaling with the area, rows independent of the
    batch; else the reason. A graph can declare dynamic height/width and still bake the anchor count in."""
    rng = np.random.default_rng(0)
    n = max(params.proof_batches) if dynamic else 1
    x = rng.random((n, 3, size, size), dtype=np.float32)
    try:
        y = session.run(None, {info.input_name: x})[0]
        singles = [session.run(None, {info.input_name: x[i:i + 1]})[0] for i in range(n)]
    except Exception as exc:  # noqa: BLE001  # any failure to run at this size is the answer
        return f"the graph does not run at {size}x{size}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if info.head == "end2end":  # [n, max_det, 6]: the top-k's k is fixed, the rows may reorder on near ties
        if tuple(y.shape) != (n, info.head_shape[1], 6):
            return f"output {list(y.shape)} at {size}x{size}, expected [{n}, {info.head_shape[1]}, 6]"
        d = [compare_batch(singles[i], y[i:i + 1], params.score_tolerance) for i in range(n)]
        worst = max(max(r["boxes"], r["scores"]) for r in d)
        if worst > params.box_tolerance_rel * size:
            return f"rows at batch {n} differ from batch 1 by {worst:.3g} at {size}x{size}"
        return ""
    expected = info.head_shape[2] * size * size / (info.imgsz * info.imgsz)
    if y.shape[0] != n or y.shape[1] != info.head_shape[1] or y.shape[2] != expected:
        return (f"output {list(y.shape)} at {size}x{size}, expected [{n}, {info.head_shape[1]}, {expected:g}]: the "
                f"anchor count does not follow the input size")
    worst = max(float(np.abs(y[i:i + 1] - singles[i]).max()) for i in range(n))
    if worst > params.box_tolerance_rel * size:
        return f"rows at batch {n} differ from batch 1 by {worst:.3g} at {size}x{size}"
    return ""


# -- publishing -------------------------------------------------------------------------------------------------------
def publish_detection_onnx(model: Path, name: str, version: str, registry, *, labels_file: Path | None = None,
                           imgsz: int | None = None, alias: str | None = None, fallback_name: str | None = None,
                           cache_dir: Path | None = None, images: Path | None = None,
                           verify_ultralytics: bool | None = None, license: str | None = None,
                           require_license: bool = False) -> tuple[list[Manifest], dict]:
    """import_detection_onnx + publish into `registry` (models.registry.LocalRegistry); (published, report).

    `images`: a folder of the model's own-domain photos for calibration/agreement/references (default: the package
    photos). Versions are immutable: an existing name:version is refused before any work.
    """
    return import_and_publish(registry, name, version, alias, "detection-onnx", lambda work: import_detection_onnx(
        model, name, version, work, labels=read_labels(labels_file) if labels_file else None, imgsz=imgsz,
        photos=user_photos(images) if images else None, cache_dir=cache_dir, fallback_name=fallback_name,
        verify_ultralytics=verify_ultralytics, license=license, require_license=require_license),
        fallback_name=fallback_name)


def log_report(report: dict) -> None:
    """The report's headline numbers, one line each (the whole report at DEBUG)."""
    log.info("batch: dynamic=%s, %d Reshape constants rewritten, proof %s", report["dynamic_batch"],
             len(report["batch_rewrite"]["reshapes"]),
             {k: f"{v:.3g}" for k, v in report["batch_proof"].items()} or report["batch_proof_reason"])
    if isinstance(report.get("ultralytics"), list):
        for row in report["ultralytics"]:
            log.info("ultralytics vs triserve %s: %d vs %d boxes, %d matched, min IoU %.6f, max score diff %.2g",
                     row["image"], row["reference"], row["candidate"], row["matched"], row["min_iou"],
                     row["max_score_diff"])
    for a in report.get("fallback_attempts", []):
        m = a.get("metrics", {})
        log.info("fallback %s: %s%s", a["method"], "passed" if a["passed"] else f"refused ({a['reason']})",
                 f"; share {m['fp32_agreement_share']:.3f}, mean IoU {m['fp32_agreement_mean_iou']:.3f}, "
                 f"{m['ms_per_image']:.1f} vs {m['fp32_ms_per_image']:.1f} ms" if m else "")
    log.info("timings (s): %s", report.get("timings_s"))
    log.debug("report: %s", json.dumps(report, default=str))


# -- CLI --------------------------------------------------------------------------------------------------------------
def _cmd_onnx(args) -> int:
    from models.registry import LocalRegistry

    def answer(out: tuple[list[Manifest], dict]) -> None:
        log_report(out[1])
        print_result(*out)

    return run_cli(lambda: publish_detection_onnx(
        args.model, args.name, args.version, LocalRegistry(args.registry), labels_file=args.labels, imgsz=args.imgsz,
        alias=args.alias, fallback_name=args.fallback_name, cache_dir=args.cache, images=args.images,
        verify_ultralytics=False if args.no_verify else None, license=args.license, require_license=True), answer)


def add_parser(subparsers) -> None:
    """Register `detection-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = subparsers.add_parser("detection-onnx", help="import an ultralytics ONNX detection export",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the .onnx file")
    p.add_argument("--name", required=True, help="registry model name, e.g. my-detector")
    p.add_argument("--version", required=True, help="immutable version, e.g. 1.0.0")
    p.add_argument("--labels", type=Path, default=None,
                   help="class names (one per line, or JSON/YAML list/dict/'names'); required without ONNX metadata")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size; required for a dynamic-size graph "
                                                           "without 'imgsz' metadata")
    add_registry_option(p)
    p.add_argument("--alias", default=None, help="also point this alias (e.g. canary) at the new version(s)")
    p.add_argument("--fallback-name", default=None,
                   help="also build, gate and publish a cheaper fallback (INT8, or a smaller size) under this name")
    p.add_argument("--images", type=Path, default=None,
                   help="photos of the model's own domain for calibration/agreement (default: package photos)")
    p.add_argument("--cache", type=Path, default=default_cache(), help="wheel and photo cache")
    p.add_argument("--no-verify", action="store_true", help="skip the ultralytics cross-check (recorded as absent)")
    add_license_option(p)
    p.set_defaults(func=_cmd_onnx)

