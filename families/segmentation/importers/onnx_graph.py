"""Import an ultralytics segment ONNX export: checked, converted (float32 IO, outputs packed), batch-dynamic where
proved, verified against ultralytics' segment predictor (boxes and masks), published.

    triserve import segmentation-onnx --model platedet.onnx --name plates --version 1.0.0 [--license SPDX]

Accepted: one input `images[b, 3, S, S]` (float32 or float16) and two outputs, output0 `[b, 4 + nc + nm, anchors]`
(cx, cy, w, h, nc sigmoid class scores, nm mask coefficients) and output1 `[b, nm, S/4, S/4]` (mask prototypes):
ultralytics' Segment head exported with nms=None. Class names and the input size come from the ONNX metadata
(`names`, `imgsz`) or --labels / a fixed input. Refused with the reason (nothing published): another task in the
metadata, one output (a detection export: detection-onnx), shapes that do not fit the layout above, class scores
outside [0, 1], non-square or dynamic-size inputs without --imgsz.

The served graph (pack.py): float32 throughout, output0 and output1 flattened and concatenated into one row.
PROVED against the ORIGINAL file at batch 1 (and at batches 4 and 2 when the batch rewrite of
models/importing/batching.py applies; else it is served at batch 1): boxes, scores, coefficients and prototypes within
tolerances (looser for a float16 original: its own rounding). Then ultralytics' predictor on the ORIGINAL file and
triserve's serving path on the served file must agree on the agreement photos (verify.py): every instance matched,
box IoU >= 0.9, mask IoU >= 0.9, score within 0.02.
"""
from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.onnx_inspect import square_input_size
from triserve.families.detection.importers.pipeline import letterboxed
from triserve.families.segmentation.importers.fallback import build_int8
from triserve.families.segmentation.importers.pack import pack_outputs, to_float32
from triserve.families.segmentation.importers.verify import verify
from triserve.families.segmentation.manifest import SegmentationPreprocess
from triserve.models.importing import batching
from triserve.models.importing.graphs import export_labels, image_input, io_specs, opset_of, ort_session, read_export
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import resolve_license, spdx_from_text
from triserve.models.importing.photos import PhotoSet, package_photos, read_rgb, user_photos
from triserve.models.importing.provenance import data_fingerprint, export_source, git_commit, source_digest, stable_hash
from triserve.models.importing.publish import (
    add_import_options,
    default_cache,
    import_and_publish,
    importer_parser,
    run_cli,
)
from triserve.models.importing.result import Artifact, GateFailed, ImportRefused, ImportResult
from triserve.models.manifest import Manifest, Source, sha256_file, utcnow

log = logging.getLogger("triserve.importer")
CODE = (Path(__file__).resolve().parent, Path(batching.__file__).resolve().parent)


@dataclass(frozen=True)
class SegParams:
    """Tolerances and gates (part of the recipe hash, recorded in the manifest)."""

    proof_batches: tuple[int, ...] = (4, 2)
    box_tolerance_rel: float = 1e-4  # x imgsz pixels, float32 original
    score_tolerance: float = 1e-4
    raw_tolerance: float = 1e-3  # mask coefficients and prototypes (unbounded raw values)
    half_factor: float = 100.0  # a float16 original: its own rounding (~1e-3 relative) against float32
    # ultralytics cross-check: its predict defaults except conf, lowered so that a one-class model (plates) has
    # instances to compare on general photos; both sides use the same thresholds
    verify_conf: float = 0.1
    min_iou: float = 0.9
    min_mask_iou: float = 0.9
    max_score_diff: float = 0.02


PARAMS = SegParams()


@dataclass(frozen=True)
class SegmenterInfo:
    path: Path
    sha256: str
    input_name: str
    head_name: str
    protos_name: str
    imgsz: int
    labels: list[str]
    mask_dim: int
    anchors: int
    proto_size: int
    half: bool
    metadata: dict[str, str]


def inspect_segmenter(path: Path, labels: Sequence[str] | None = None, imgsz: int | None = None) -> SegmenterInfo:
    """Read and check an ultralytics segment export; ImportRefused (with the reason) for anything else."""
    import onnx

    path = Path(path)
    model, meta = read_export(path, "segment", "a detection export: import it with detection-onnx")
    inp, dims = image_input(model, path.name)
    elem = inp.type.tensor_type.elem_type
    if elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) or len(dims) != 4 or dims[1] != 3:
        raise ImportRefused(f"{path.name}: input {inp.name} must be float32/float16 [b, 3, S, S], got {dims}")
    if isinstance(dims[0], int) and dims[0] != 1:
        raise ImportRefused(f"{path.name}: fixed batch {dims[0]}: only batch-1 or dynamic-batch exports")
    if len(model.graph.output) != 2:
        raise ImportRefused(f"{path.name}: {len(model.graph.output)} output(s); a segment export has two (output0 "
                            f"boxes/classes/mask coefficients, output1 prototypes); a detection export: detection-onnx")
    labels, _ = export_labels(path.name, labels, meta, " (no 'names' metadata); pass --labels FILE")
    nc = len(labels)
    size = square_input_size(path.name, dims[2], dims[3], imgsz, meta)
    half = elem == onnx.TensorProto.FLOAT16
    try:
        session = ort_session(path, threads=1)
        outs = session.run(None, {inp.name: np.full((1, 3, size, size), 114 / 255.0,
                                                    np.float16 if half else np.float32)})
    except Exception as exc:
        raise ImportRefused(f"{path.name}: ONNX Runtime cannot run it at 1x3x{size}x{size}: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc
    head, protos = outs[0], outs[1]
    if head.ndim != 3 or protos.ndim != 4 or protos.shape[2] != protos.shape[3]:
        raise ImportRefused(f"{path.name}: outputs {list(head.shape)}, {list(protos.shape)}: expected "
                            f"[b, 4 + nc + nm, anchors] and [b, nm, S/4, S/4]")
    nm = int(protos.shape[1])
    if head.shape[1] != 4 + nc + nm:
        raise ImportRefused(f"{path.name}: output0 {list(head.shape)} has {head.shape[1]} channels, expected 4 + {nc} "
                            f"classes + {nm} mask coefficients = {4 + nc + nm}")
    scores = head[0, 4:4 + nc].astype(np.float32)
    if not np.isfinite(head).all() or scores.min() < -1e-3 or scores.max() > 1 + 1e-3:
        raise ImportRefused(f"{path.name}: class scores outside [0, 1]: no sigmoid, not an ultralytics Segment head")
    names = [o.name for o in session.get_outputs()]
    return SegmenterInfo(path, sha256_file(path), inp.name, names[0], names[1], int(size), list(labels), nm,
                         int(head.shape[2]), int(protos.shape[2]), half, meta)


def _packed_runner(session, half: bool):
    """The ORIGINAL graph as a runner of packed float32 rows (what the served graph returns)."""
    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = {k: v.astype(np.float16) if half else v for k, v in feeds.items()}
        head, protos = session.run(None, x)[:2]
        n = head.shape[0]
        return [np.concatenate([head.reshape(n, -1), protos.reshape(n, -1)], axis=1).astype(np.float32)]
    return run


def convert(info: SegmenterInfo, dst: Path, dynamic: bool) -> batching.Rewrite:
    """float32, batch-dynamic (when asked), packed: the served graph at `dst`."""
    import onnx

    model = onnx.load(str(info.path))
    to_float32(model)
    rewrite = batching.Rewrite()
    if dynamic:
        model, rewrite = batching.make_batch_dynamic(model)
    pack_outputs(model, info.head_name, info.protos_name)
    batching.save(model, dst)
    return rewrite


def import_segmentation_onnx(model_path: Path, name: str, version: str, work_dir: Path, *,
                             labels: Sequence[str] | None = None, imgsz: int | None = None,
                             photos: PhotoSet | None = None, cache_dir: Path | None = None,
                             source: Source | None = None, verify_ultralytics: bool | None = None,
                             reference: Path | None = None, params: SegParams = PARAMS, license: str | None = None,
                             require_license: bool = False, importer: str = "segmentation-onnx",
                             fallback_name: str | None = None, require_fallback: bool = False) -> ImportResult:
    """Check, convert, prove, verify and describe an ultralytics segment ONNX export (artifacts under `work_dir`).

    `reference`: what ultralytics' predictor runs (default: the ONNX file itself; the .pt for segmentation-pt).
    `verify_ultralytics`: None = when ultralytics is installed; True = required; False = skipped (recorded).
    `fallback_name`: also build and gate the INT8 sibling (fallback.py); `require_fallback`: its failure refuses."""
    model_path = Path(model_path)
    cache_dir = Path(cache_dir) if cache_dir else default_cache()
    info = inspect_segmenter(model_path, labels, imgsz)
    weights_license = resolve_license(license, spdx_from_text(info.metadata.get("license")), model_path.name,
                                      required=require_license and source is None)
    pre = SegmentationPreprocess(imgsz=info.imgsz, anchors=info.anchors, mask_dim=info.mask_dim,
                                 proto_size=info.proto_size)
    photos = photos if photos is not None else package_photos(cache_dir)
    if not photos.agreement:
        raise GateFailed("no agreement photos: need ultralytics' assets, the photo wheels or --images DIR")
    images = [read_rgb(p.path) for p in photos.agreement + photos.calibration]
    staging = Path(work_dir) / name
    staging.mkdir(parents=True, exist_ok=True)
    served = staging / "model.onnx"

    # 1. the served graph, proved against the original file (rows of real photos)
    factor = params.half_factor if info.half else 1.0
    a, nc = info.anchors, len(info.labels)
    parts = {"boxes": (slice(0, 4 * a), params.box_tolerance_rel * info.imgsz * factor),
             "scores": (slice(4 * a, (4 + nc) * a), params.score_tolerance * factor),
             "masks": (slice((4 + nc) * a, None), params.raw_tolerance * factor)}
    n = max(params.proof_batches)
    rows = batching.distinct_rows(letterboxed(images[:n], pre)[0], n)
    original = _packed_runner(ort_session(model_path, threads=1), info.half)
    proof, rewrite, dynamic = batching.BatchProof(False, [], "not tried"), batching.Rewrite(), False
    try:
        rewrite = convert(info, served, dynamic=True)
        s = ort_session(served, threads=1)
        proof = batching.prove_dynamic_batch(original, lambda f: s.run(None, f), info.input_name, rows, parts,
                                             params.proof_batches)
        dynamic = proof.passed
    except Exception as exc:  # noqa: BLE001 - a rewrite that fails means: serve at batch 1
        proof = batching.BatchProof(False, [], f"batch rewrite failed: {type(exc).__name__}: {exc}")
    if not dynamic:
        log.warning("%s: batch proof failed (%s): served at batch 1", name, proof.reason)
        rewrite = convert(info, served, dynamic=False)
        s = ort_session(served, threads=1)
        proof = batching.prove_dynamic_batch(original, lambda f: s.run(None, f), info.input_name, rows, parts, (1,))
        if not proof.passed:
            raise GateFailed(f"{name}: the converted graph disagrees with the original at batch 1: {proof.reason}")

    # 2. ultralytics' predictor on the original vs triserve's serving path on the served graph
    check = None
    if verify_ultralytics is not False:
        from triserve.families.detection.importers.verify import ultralytics_available

        if ultralytics_available():
            check = verify(Path(reference or model_path), ort_session(served, threads=1),
                           [p.path for p in photos.agreement], pre, nc, cache_dir, params.min_iou,
                           params.min_mask_iou, params.max_score_diff, conf=params.verify_conf)
            if not check.passed:
                raise GateFailed(f"{name}: triserve's pipeline disagrees with ultralytics' segment predictor: "
                                 f"{check.describe()}")
            if check.reference_instances == 0:
                log.warning("%s: ultralytics found no instance on the agreement photos: the check is vacuous; pass "
                            "--images with photos of the model's domain", name)
        elif verify_ultralytics:
            raise GateFailed("ultralytics is not installed: cannot verify against its predictor")

    inputs, outputs = io_specs(served)
    source = export_source(
        source, license, weights_license, model_path, info.sha256, info.metadata, "segment export",
        f"{'float16 converted to float32, ' if info.half else ''}outputs packed into one row. Imported by "
        f"families/segmentation/importers/{'checkpoint' if importer == 'segmentation-pt' else 'onnx_graph'}.py")
    recipe = {"importer": importer, "source_sha256": info.sha256, "half_source": info.half,
              "onnx_metadata": {k: v for k, v in info.metadata.items() if k != "names"},
              "batch_rewrite": {**rewrite.as_dict(), "proved": dynamic, "reason": proof.reason},
              "params": asdict(params), "photos": photos.describe()}
    metrics = {f"proof_max_abs_diff_{k}": v for k, v in proof.worst.items()}
    gates = {"dynamic_batch": dynamic, "batch_proof": proof.passed}
    if check is not None:
        metrics.update(check.metrics())
        gates["ultralytics_agreement"] = check.passed
    manifest = Manifest(
        name=name, version=version, task="segmentation", variant="primary", model_file="model.onnx", files=[],
        opset=opset_of(served), inputs=inputs, outputs=outputs, preprocess=pre, labels=info.labels,
        source=source.model_copy(update={"recipe": {**source.recipe, **recipe}}),
        data_fingerprint=data_fingerprint(model_path), metrics=metrics, parity=proof.checks, gates=gates,
        recipe_hash=stable_hash({"source": info.sha256, "labels": info.labels, "imgsz": info.imgsz,
                                 "params": asdict(params), "code": source_digest(CODE)}),
        created_at=utcnow(), git_commit=git_commit())
    report = {"name": name, "version": version, "imgsz": info.imgsz, "classes": nc, "half_source": info.half,
              "dynamic_batch": dynamic, "batch_proof": {c.case: c.max_abs_diff for c in proof.checks},
              "batch_proof_reason": proof.reason, "ultralytics": check.rows if check is not None else "skipped"}
    fallback = None
    if fallback_name:
        fallback = _int8_sibling(info, served, pre, photos, Path(work_dir), fallback_name, manifest, params)
        report["fallback"] = fallback[1]
        if fallback[0] is None:
            msg = f"{name}: the INT8 fallback failed its gates: {fallback[1]['reason']}"
            if require_fallback:
                raise GateFailed(msg)
            log.warning(msg)
    return ImportResult(Artifact(staging=staging, manifest=manifest), fallback[0] if fallback else None, report)


def _int8_sibling(info: SegmenterInfo, served: Path, pre: SegmentationPreprocess, photos: PhotoSet, work_dir: Path,
                  fallback_name: str, primary: Manifest, params: SegParams) -> tuple[Artifact | None, dict]:
    """fallback.build_int8 gated against the served FP32 graph; the staged artifact when it passed."""
    agree = [read_rgb(p.path) for p in photos.agreement]
    cal = [read_rgb(p.path) for p in photos.calibration] or agree
    res = build_int8(info.path, info.head_name, info.protos_name, served, pre, len(info.labels), agree,
                     [p.name for p in photos.agreement], cal, work_dir / "int8", params.verify_conf)
    report = {"name": fallback_name, "passed": res.passed, "reason": res.reason, "dynamic_batch": res.dynamic,
              **res.metrics}
    if res.path is None:
        return None, report
    staging = work_dir / fallback_name
    staging.mkdir(parents=True, exist_ok=True)
    shutil.copy2(res.path, staging / "model.onnx")
    inputs, outputs = io_specs(staging / "model.onnx")
    manifest = primary.model_copy(update={
        "name": fallback_name, "variant": "fallback", "fallback_for": primary.name, "inputs": inputs,
        "outputs": outputs, "opset": opset_of(staging / "model.onnx"), "parity": [], "metrics": res.metrics,
        "gates": {"fp32_agreement": True, "cheaper": True, "dynamic_batch": res.dynamic},
        "source": primary.source.model_copy(update={
            "description": f"{primary.source.description}. Fallback: {res.method['summary']}",
            "recipe": {**primary.source.recipe, "fallback": res.method}}),
        "recipe_hash": stable_hash({"primary": primary.recipe_hash, "fallback": res.method.get("summary")})})
    assert manifest.labels == primary.labels, "a fallback serves the primary's label set"
    return Artifact(staging=staging, manifest=manifest), report


def publish_segmentation_onnx(model: Path, name: str, version: str, registry, *, labels_file: Path | None = None,
                              imgsz: int | None = None, alias: str | None = None, cache_dir: Path | None = None,
                              images: Path | None = None, verify_ultralytics: bool | None = None,
                              license: str | None = None, require_license: bool = False,
                              fallback_name: str | None = None) -> tuple[list[Manifest], dict]:
    """import_segmentation_onnx + publish into `registry`; (published, report). Existing versions are refused first."""
    def build(work: Path) -> ImportResult:
        return import_segmentation_onnx(model, name, version, work,
                                        labels=read_labels(labels_file) if labels_file else None, imgsz=imgsz,
                                        photos=user_photos(images) if images else None, cache_dir=cache_dir,
                                        verify_ultralytics=verify_ultralytics, license=license,
                                        require_license=require_license, fallback_name=fallback_name)

    return import_and_publish(registry, name, version, alias, "segmentation-onnx", build, fallback_name=fallback_name)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_segmentation_onnx(
        args.model, args.name, args.version, LocalRegistry(args.registry), labels_file=args.labels, imgsz=args.imgsz,
        alias=args.alias, cache_dir=args.cache, images=args.images,
        verify_ultralytics=False if args.no_verify else None, license=args.license, require_license=True,
        fallback_name=args.fallback_name))


def add_parser(subparsers) -> None:
    """Register `segmentation-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = importer_parser(subparsers, "segmentation-onnx", "import an ultralytics segment ONNX export", __doc__,
                        ("--model", "the .onnx file"),
                        name_help="registry model name, e.g. plates", version_help="immutable version, e.g. 1.0.0")
    p.add_argument("--labels", type=Path, default=None, help="class names; required without ONNX metadata")
    p.add_argument("--imgsz", type=int, default=None, help="letterbox size for a dynamic-size graph")
    add_import_options(p, _cmd, fallback=True, verify=True)
