"""Reading an ultralytics pose export: its input, class names, size, keypoint shape and schema and its head, checked
by one probe run; anything else is refused with the reason (ImportRefused). What is accepted: onnx_graph.py."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.detection.importers.onnx_inspect import square_input_size
from triserve.families.pose.keypoints import keypoint_schema
from triserve.models.importing.graphs import export_labels, image_input, metadata_literal, ort_session, read_export
from triserve.models.importing.result import ImportRefused
from triserve.models.manifest import sha256_file


@dataclass(frozen=True)
class PoseGraphInfo:
    path: Path
    sha256: str
    input_name: str
    imgsz: int
    labels: list[str]
    labels_from: str
    kpt_shape: list[int]
    schema: dict[str, Any]
    batch: int | str
    head_shape: tuple[int, ...]
    metadata: dict[str, str]


def inspect_pose_graph(path: Path, labels: list[str] | None = None, imgsz: int | None = None) -> PoseGraphInfo:
    """Read and check an ultralytics pose export; ImportRefused (with the reason) for anything else."""
    import onnx

    path = Path(path)
    model, meta = read_export(path, "pose", "detectors: detection-onnx")
    if "kpt_shape" not in meta:
        raise ImportRefused(f"{path.name}: no 'kpt_shape' metadata: not an ultralytics pose export (re-export it "
                            f"with ultralytics, which records kpt_shape)")
    kpt_shape = metadata_literal(meta, "kpt_shape")
    if not isinstance(kpt_shape, (list, tuple)) or len(kpt_shape) != 2:
        raise ImportRefused(f"{path.name}: metadata kpt_shape {kpt_shape!r} is not [K, dims]")
    kpt_shape = [int(x) for x in kpt_shape]
    inp, dims = image_input(model, path.name)
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or len(dims) != 4 or dims[1] != 3:
        raise ImportRefused(f"{path.name}: input {inp.name} must be float32 [b, 3, S, S], got {dims}")
    batch = dims[0] if dims[0] is not None else "batch"
    if isinstance(batch, int) and batch != 1:
        raise ImportRefused(f"{path.name}: fixed batch {batch}: only batch-1 or dynamic-batch exports are imported")
    labels, labels_from = export_labels(path.name, labels, meta, " ('names' metadata); pass --labels FILE")
    size = square_input_size(path.name, dims[2], dims[3], imgsz, meta)
    try:
        schema = keypoint_schema(kpt_shape, labels, metadata_literal(meta, "kpt_names")
                                 if "kpt_names" in meta else None)
    except ValueError as exc:
        raise ImportRefused(f"{path.name}: keypoint schema: {exc}") from exc
    try:
        session = ort_session(path, threads=1)
        outs = session.run(None, {inp.name: np.full((1, 3, size, size), 114 / 255.0, np.float32)})
    except Exception as exc:
        raise ImportRefused(f"{path.name}: ONNX Runtime cannot run it at 1x3x{size}x{size}: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    head = tuple(int(x) for x in outs[0].shape)
    channels = 4 + len(labels) + kpt_shape[0] * kpt_shape[1]
    if len(outs) != 1 or len(head) != 3 or head[1] != channels:
        nms_like = len(head) == 3 and head[2] == 6 + kpt_shape[0] * kpt_shape[1]
        raise ImportRefused(f"{path.name}: outputs {[list(o.shape) for o in outs]}: expected one [b, 4 + "
                            f"{len(labels)} + {kpt_shape[0]}*{kpt_shape[1]} = {channels}, anchors]"
                            + (" (this looks like an NMS-free / in-graph-NMS export [b, max_det, 6 + K*dims]; "
                               "re-export with nms=False on an anchors head)" if nms_like else ""))
    row = outs[0][0]
    scores = row[4:4 + len(labels)]
    conf = row[4 + len(labels):][2::3] if kpt_shape[1] == 3 else np.zeros(0)
    for what, arr in (("class scores", scores), ("keypoint confidences", conf)):
        if arr.size and (not np.isfinite(arr).all() or arr.min() < -1e-3 or arr.max() > 1 + 1e-3):
            raise ImportRefused(f"{path.name}: {what} outside [0, 1]: not an ultralytics Pose export")
    return PoseGraphInfo(path=path, sha256=sha256_file(path), input_name=inp.name, imgsz=size, labels=labels,
                         labels_from=labels_from, kpt_shape=kpt_shape, schema=schema, batch=batch, head_shape=head,
                         metadata=meta)
