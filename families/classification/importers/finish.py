"""The last mile every classification import shares: graph IO checked, the batch axis made dynamic and proved, the
served path checked against a reference, the INT8 fallback built behind its gate, the manifests written.

The served path is what the service runs: preprocess.crop (uint8, PIL) -> runtime.network_batch (mean/std) -> the
published graph at batch n -> postprocess.probabilities. The check compares it, photo by photo, with a reference the
caller gives (ultralytics' own predictor, torchvision's transform into the raw graph): the top-5 classes identical and
every probability within `tolerance`. The INT8 sibling (onnxruntime static QDQ, calibrated on the calibration photos)
is kept only when its top-1 class agrees with the FP32 graph's on at least `min_int8_agreement` of the agreement photos.
"""
from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.classification.manifest import ClassificationPreprocess
from triserve.families.classification.postprocess import check_scores, probabilities, top_k
from triserve.families.classification.preprocess import crop
from triserve.families.classification.runtime import network_batch
from triserve.kernel.errors import InvalidOutput
from triserve.models.importing import batching
from triserve.models.importing.graphs import io_specs, opset_of, ort_session, quantize_qdq
from triserve.models.importing.photos import PhotoSet, read_rgb
from triserve.models.importing.provenance import data_fingerprint, git_commit, source_digest, stable_hash
from triserve.models.importing.references import histogram_reference
from triserve.models.importing.result import Artifact, GateFailed, ImportRefused, ImportResult
from triserve.models.manifest import Manifest, ParityCheck, Source, utcnow

log = logging.getLogger("triserve.importer")
CODE = [Path(__file__).resolve().parent.parent]  # the family's code: serving path and importers (versions name it)
Reference = Callable[[list[np.ndarray]], np.ndarray]  # RGB photos -> [n, classes] probabilities


@dataclass(frozen=True)
class Params:
    tolerance: float = 1e-4  # max |served - reference| per probability
    top: int = 5  # classes that must come out in the same order
    min_int8_agreement: float = 0.8  # top-1 agreement of INT8 with FP32 on the agreement photos


PARAMS = Params()


def check_graph(path: Path, num_labels: int, imgsz: int) -> tuple[str, int | str]:
    """One float image input [b, 3, S, S] (S = imgsz or dynamic) and one output [b, classes]; (input name, batch
    dim). Anything else is refused with what was found."""
    inputs, outputs = io_specs(path)
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].dtype != "float32":
        raise ImportRefused(f"{path.name}: expected one float32 input [batch, 3, H, W], got "
                            f"{[(i.name, i.dtype, i.shape) for i in inputs]}")
    shape = inputs[0].shape
    if shape[1] != 3 or any(isinstance(d, int) and d != imgsz for d in shape[2:]):
        raise ImportRefused(f"{path.name}: input {inputs[0].name} {shape} is not [batch, 3, {imgsz}, {imgsz}] "
                            f"(declared imgsz {imgsz})")
    if not outputs or len(outputs[0].shape) != 2 or outputs[0].shape[1] not in (num_labels, "classes"):
        found = outputs[0].shape if outputs else None
        raise ImportRefused(f"{path.name}: the first output must be [batch, {num_labels}] (one score per label), "
                            f"got {found}")
    return inputs[0].name, shape[0]


def served_probabilities(model: Path, pre: ClassificationPreprocess, images: list[np.ndarray],
                         batch: int = 8) -> np.ndarray:
    """[n, classes] probabilities through the service's own path, `batch` images per call."""
    session = ort_session(model)
    name = session.get_inputs()[0].name
    rows = []
    for i in range(0, len(images), batch):
        x = network_batch([crop(im, pre) for im in images[i:i + batch]], pre)
        rows += [probabilities(r, pre.output) for r in session.run(None, {name: x})[0]]
    return np.stack(rows)


def compare(served: np.ndarray, reference: np.ndarray, names: list[str], params: Params = PARAMS) -> dict:
    """Per photo: top-k identical and the largest probability difference; `passed` when all hold."""
    rows = {}
    for name, s, r in zip(names, served, reference):
        same = [int(j) for j in top_k(s, params.top)] == [int(j) for j in top_k(r, params.top)]
        diff = float(np.max(np.abs(s - r)))
        rows[name] = {"top_identical": same, "max_abs_diff": diff, "top1": int(np.argmax(s)),
                      "top1_prob": float(s.max())}
    worst = max((v["max_abs_diff"] for v in rows.values()), default=0.0)
    passed = bool(rows) and all(v["top_identical"] for v in rows.values()) and worst <= params.tolerance
    return {"photos": rows, "max_abs_diff": worst, "passed": passed}


def dynamic_batch(src: Path, dst: Path, input_name: str, rows: np.ndarray) -> tuple[bool, list[ParityCheck]]:
    """The graph with a dynamic batch axis at `dst` (rewritten when it is pinned to 1, proved row by row against the
    original on real rows); (rewritten, proof checks). A rewrite that fails its proof is refused."""
    import onnx

    shutil.copyfile(src, dst)
    _, batch = check_graph_batch(src)
    if batch != 1:
        return False, []
    model, _ = batching.make_batch_dynamic(onnx.load(str(src)))
    batching.save(model, dst)
    original, rewritten = ort_session(src), ort_session(dst)
    proof = batching.prove_dynamic_batch(lambda f: original.run(None, f), lambda f: rewritten.run(None, f),
                                         input_name, rows, {"scores": (slice(None), 1e-4)})
    if not proof.passed:
        raise GateFailed(f"{src.name}: the batch-1 graph could not be made batch-dynamic: {proof.reason}")
    return True, proof.checks


def check_graph_batch(path: Path) -> tuple[str, int | str]:
    inputs, _ = io_specs(path)
    return inputs[0].name, inputs[0].shape[0]


def softmax_nodes(model) -> list[str]:
    """Softmax stays FP32: quantised, its output no longer sums to 1 (the service refuses such rows)."""
    return [n.name for n in model.graph.node if n.op_type == "Softmax"]


def int8_sibling(model: Path, pre: ClassificationPreprocess, photos: PhotoSet, work: Path,
                 params: Params = PARAMS) -> tuple[Path | None, dict]:
    """Static INT8 of `model` calibrated on the calibration photos' served tensors, kept when its top-1 agrees with
    the FP32 graph on the agreement photos; (path or None, report)."""
    name = ort_session(model).get_inputs()[0].name
    calib = [{name: network_batch([crop(read_rgb(p.path), pre)], pre)} for p in photos.calibration]
    dst = work / "model.int8.onnx"
    how = quantize_qdq(model, dst, calib, work / "int8", exclude=softmax_nodes)
    images = [read_rgb(p.path) for p in photos.agreement]
    fp32, int8 = served_probabilities(model, pre, images), served_probabilities(dst, pre, images)
    try:
        for row in int8:
            check_scores(row, fp32.shape[1], "probabilities")
    except InvalidOutput as exc:
        return None, {"quantization": how, "reason": f"INT8 outputs the service would refuse: {exc}"}
    agree = float(np.mean(np.argmax(fp32, 1) == np.argmax(int8, 1))) if images else 0.0
    report = {"quantization": how, "top1_agreement": agree, "photos": len(images),
              "max_abs_diff": float(np.max(np.abs(fp32 - int8))) if images else None,
              "min_top1_agreement": params.min_int8_agreement}
    if agree < params.min_int8_agreement:
        report["reason"] = f"INT8 top-1 agreement {agree:.2f} < {params.min_int8_agreement} on {len(images)} photos"
        return None, report
    return dst, report


def manifest(name: str, version: str, model: Path, pre: ClassificationPreprocess, labels: list[str], source: Source,
             metrics: dict[str, float], parity: list[ParityCheck], gates: dict[str, bool], reference_probs: np.ndarray,
             recipe: dict, variant: str = "primary", fallback_for: str | None = None) -> Manifest:
    inputs, outputs = io_specs(model)
    top1 = reference_probs.max(axis=1) if len(reference_probs) else np.zeros(0)
    return Manifest(
        name=name, version=version, task="classification", variant=variant, fallback_for=fallback_for,
        model_file="model.onnx", files=[], opset=opset_of(model), inputs=inputs, outputs=outputs, preprocess=pre,
        labels=labels, source=source.model_copy(update={"recipe": {**source.recipe, **recipe}}),
        data_fingerprint=data_fingerprint(model), metrics=metrics, parity=parity if variant == "primary" else [],
        gates=gates, reference={"top1_prob": histogram_reference(top1, np.linspace(0.0, 1.0, 11))},
        recipe_hash=stable_hash({"recipe": recipe, "code": source_digest(CODE)}), created_at=utcnow(),
        git_commit=git_commit())


def finish(graph: Path, labels: list[str], pre: ClassificationPreprocess, name: str, version: str, work: Path,
           photos: PhotoSet, source: Source, reference: Reference, recipe: dict, fallback_name: str | None = None,
           require_fallback: bool = False, params: Params = PARAMS) -> ImportResult:
    """An FP32 classifier graph -> checked, batch-dynamic, verified against `reference` on every photo, with its
    gated INT8 sibling: the staged ImportResult (nothing published)."""
    work = Path(work)
    input_name, _ = check_graph(graph, len(labels), pre.imgsz)
    images = [read_rgb(p.path) for p in photos.all()]
    names = [p.name for p in photos.all()]
    if len(images) < 4:
        raise GateFailed(f"{name}: needs at least 4 photos for the checks, got {len(images)}")
    staged = work / name
    staged.mkdir(parents=True, exist_ok=True)
    rows = network_batch([crop(im, pre) for im in images[:4]], pre)
    rewritten, proof = dynamic_batch(graph, staged / "model.onnx", input_name, rows)
    served = served_probabilities(staged / "model.onnx", pre, images)
    if pre.output == "probabilities" and np.max(np.abs(served.sum(axis=1) - 1.0)) > 1e-3:
        raise ImportRefused(f"{graph.name}: its outputs do not sum to 1 (logits?): declare the output as logits")
    check = compare(served, reference(images), names, params)
    log.info("%s: served path vs reference on %d photos: top-%d identical %s, max |diff| %.2e", name, len(images),
             params.top, all(v["top_identical"] for v in check["photos"].values()), check["max_abs_diff"])
    if not check["passed"]:
        raise GateFailed(f"{name}: the served path disagrees with the reference (top-{params.top} identical on every "
                         f"photo and probabilities within {params.tolerance:g} required): {check['photos']}")
    agreement = [read_rgb(p.path) for p in photos.agreement]
    ref_probs = served_probabilities(staged / "model.onnx", pre, agreement) if agreement else served
    metrics = {"verify_max_abs_diff": check["max_abs_diff"], "verify_photos": float(len(images))}
    gates = {"reference_top5_identical": True, "reference_probabilities": True,
             **({"dynamic_batch_proof": True} if rewritten else {})}
    primary = manifest(name, version, staged / "model.onnx", pre, labels, source, metrics, proof, gates, ref_probs,
                       recipe)
    report: dict = {"name": name, "version": version, "dynamic_batch_rewrite": rewritten, "verify": check,
                    "photos": photos.describe()}
    fallback = None
    if fallback_name:
        path, int8 = int8_sibling(staged / "model.onnx", pre, photos, work / "int8", params)
        report["fallback"] = int8
        if path is None:
            if require_fallback:
                raise GateFailed(f"{name}: the INT8 fallback failed its gate: {int8['reason']}")
            log.warning("%s: no INT8 fallback: %s", name, int8["reason"])
        else:
            lite = work / fallback_name
            lite.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, lite / "model.onnx")
            fb = manifest(fallback_name, version, lite / "model.onnx", pre, labels, source,
                          {"int8_top1_agreement": int8["top1_agreement"]}, [], {"int8_top1_agreement": True},
                          ref_probs, {**recipe, "int8": int8["quantization"]}, variant="fallback",
                          fallback_for=name)
            fallback = Artifact(staging=lite, manifest=fb)
    return ImportResult(primary=Artifact(staging=staged, manifest=primary), fallback=fallback, report=report)
