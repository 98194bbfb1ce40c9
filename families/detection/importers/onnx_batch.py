"""The graph a detection import serves: a batch-1 export rewritten batch-dynamic (models/importing/batching.py) and
PROVED row by row against the original, else the original at batch 1 (onnx_graph.py's docstring says how)."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.end2end import compare_batch
from triserve.families.detection.importers.onnx_inspect import DetectorInfo
from triserve.families.detection.importers.params import ImportParams
from triserve.models.importing import batching
from triserve.models.importing.graphs import ort_session

log = logging.getLogger("triserve.importer")


def runner(session):
    return lambda feeds: session.run(None, feeds)


def proof_parts(info: DetectorInfo, params: ImportParams):
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


def serve_batched(model_path: Path, info: DetectorInfo, rows: np.ndarray, served: Path, candidate: Path,
                  params: ImportParams, name: str) -> tuple[batching.BatchProof, batching.Rewrite]:
    """Write the graph to serve at `served`: the rewrite (staged at `candidate`) when its proof on `rows` passes, else
    the original with batch 1 in its IO; (the proof, what the rewrite changed)."""
    import onnx

    rewrite = batching.Rewrite()
    rewrite_error = ""
    try:
        rewritten, rewrite = batching.make_batch_dynamic(onnx.load(str(model_path)))
        rewritten.metadata_props.add(key="triserve_batch", value="dynamic (models/importing/batching.py)")
        batching.save(rewritten, candidate)
    except Exception as exc:  # noqa: BLE001  # a failed rewrite means: serve the original, unbatched
        rewrite_error = f"rewrite failed: {type(exc).__name__}: {exc}"
    parts, compare = proof_parts(info, params)
    original = ort_session(model_path, threads=1)
    if rewrite_error:
        proof = batching.BatchProof(False, [], rewrite_error)
    else:
        try:
            rewritten_session = ort_session(candidate, threads=1)
        except Exception as exc:  # noqa: BLE001  # a rewrite ONNX Runtime cannot load fails the proof
            proof = batching.BatchProof(False, [], f"rewritten graph does not load: {type(exc).__name__}: {exc}")
        else:
            proof = batching.prove_dynamic_batch(runner(original), runner(rewritten_session), info.input_name,
                                                 rows, parts, params.proof_batches, compare=compare)
    if proof.passed:
        shutil.copy2(candidate, served)
    elif isinstance(info.batch, str):
        _pin_batch_one(model_path, served)
    else:
        shutil.copy2(model_path, served)
    if not proof.passed:
        log.warning("%s: batch proof failed (%s): published with fixed batch 1; the runner must feed it one item at "
                    "a time", name, proof.reason)
    return proof, rewrite
