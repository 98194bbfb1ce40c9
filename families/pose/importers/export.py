"""An ultralytics pose checkpoint exported to ONNX WITH its keypoint branch, and proved against torch.

The export is the detection family's (families/detection/importers/export.export_onnx: ultralytics' exporter, dynamic
batch/height/width, opset 17); what differs is the head: [b, 4 + nc + K * dims, anchors]. Parity (torch fp32 eval vs
ONNX Runtime, several batches and sizes, synthetic scenes) is four checks per case: boxes and keypoint x, y within
1e-4 x the input's longer side (pixels), class scores and keypoint confidences within 1e-4.

torch, ultralytics and onnx are imported inside the functions (the export extra).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.evaluate import latency_ab
from triserve.families.detection.importers.export import (
    class_names,
    export_onnx,
    load_torch_model,
    parity_cases,
    pin_output_channels,
    tensor_specs,
)
from triserve.families.pose.keypoints import keypoint_schema
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.parity import parity_gate
from triserve.models.importing.result import GateFailed
from triserve.models.manifest import ParityCheck, TensorSpec


def pose_facts(model) -> tuple[list[str], list[int], dict]:
    """(labels, kpt_shape, keypoint schema) of an ultralytics PoseModel: kpt_shape from the head (what it computes),
    names from the model's `kpt_names` (ultralytics >= 8.3 records them), else keypoints.keypoint_schema's rule."""
    labels = class_names(model)
    head = model.model[-1]
    kpt_shape = getattr(head, "kpt_shape", None) or getattr(model, "kpt_shape", None)
    if kpt_shape is None:
        raise GateFailed(f"{type(head).__name__} head has no kpt_shape: not an ultralytics Pose head")
    kpt_shape = [int(x) for x in kpt_shape]
    yaml = getattr(model, "yaml", None) or {}
    flip = yaml.get("flip_idx") if isinstance(yaml, dict) else None
    try:
        schema = keypoint_schema(kpt_shape, labels, getattr(model, "kpt_names", None), flip)
    except ValueError as exc:
        raise GateFailed(f"keypoint schema: {exc}") from exc
    return labels, kpt_shape, schema


def check_pose_io(inputs: list[TensorSpec], outputs: list[TensorSpec], nc: int, kpt_shape: Sequence[int],
                  batch: int | str = "batch", fixed_size: int | None = None) -> None:
    """What the service serves, and nothing else: images[batch,3,height,width] -> output0[batch,4+nc+K*dims,anchors]
    (a fixed-batch-1 graph: images[1,3,S,S])."""
    want_in = [batch, 3, fixed_size, fixed_size] if fixed_size else [batch, 3, "height", "width"]
    if len(inputs) != 1 or inputs[0].shape != want_in:
        raise GateFailed(f"unexpected ONNX inputs {[i.model_dump() for i in inputs]} (expected {want_in})")
    channels = 4 + nc + int(kpt_shape[0]) * int(kpt_shape[1])
    if len(outputs) != 1 or len(outputs[0].shape) != 3 or outputs[0].shape[1] != channels:
        raise GateFailed(f"unexpected ONNX outputs {[o.model_dump() for o in outputs]} (expected [{batch}, "
                         f"{channels}, anchors] for {nc} classes and {list(kpt_shape)} keypoints)")


def export_pose_onnx(weights: Path, out: Path, imgsz: int, nc: int, kpt_shape: Sequence[int]) -> Path:
    """ultralytics' ONNX export of the whole pose model; output0's channel axis pinned to 4 + nc + K * dims."""
    export_onnx(weights, out, imgsz, 17)
    pin_output_channels(out, nc + int(kpt_shape[0]) * int(kpt_shape[1]), "anchors")
    inputs, outputs, _ = tensor_specs(out)
    check_pose_io(inputs, outputs, nc, kpt_shape)
    return out


class _Rows:
    """A session view returning one group of output0's channels (boxes, scores, keypoint xy, keypoint confidence):
    what parity_gate compares per group; ONNX Runtime runs once per feed."""

    def __init__(self, session, rows: np.ndarray, memo: dict):
        self.session, self.rows, self.memo = session, rows, memo

    def run(self, names, feeds):
        x = feeds["images"]
        if self.memo.get("x") is not x:
            self.memo.update(x=x, y=self.session.run(names, feeds)[0])
        return [self.memo["y"][:, self.rows]]


def channel_groups(nc: int, kpt_shape: Sequence[int]) -> dict[str, tuple[np.ndarray, bool]]:
    """group -> (output0 channel indices, measured in pixels)."""
    k, dims = int(kpt_shape[0]), int(kpt_shape[1])
    base = 4 + nc
    kp = np.arange(k * dims).reshape(k, dims) + base
    groups = {"boxes": (np.arange(4), True), "scores": (np.arange(4, base), False),
              "keypoints": (kp[:, :2].reshape(-1), True)}
    if dims == 3:
        groups["keypoint_conf"] = (kp[:, 2], False)
    return groups


def check_pose_parity(model, onnx_path: Path, nc: int, kpt_shape: Sequence[int], sizes: Sequence[Sequence[int]],
                      batches: Sequence[int], tolerance: float = 1e-4) -> list[ParityCheck]:
    """torch vs ONNX Runtime on every (batch, size); GateFailed past the tolerance (pixels: x the longer side)."""
    session = ort_session(onnx_path)
    memo: dict = {}
    groups = channel_groups(nc, kpt_shape)
    checks: list[ParityCheck] = []
    for case, feeds, expected in parity_cases(model, sizes, batches):
        side = float(max(feeds["images"].shape[2:]))
        for group, (rows, pixels) in groups.items():
            checks += parity_gate([(f"{case}/{group}", feeds, expected[:, rows])], _Rows(session, rows, memo),
                                  tolerance * side if pixels else tolerance)
    return checks


def default_parity_sizes(imgsz: int) -> list[list[int]]:
    half = max(32, (imgsz // 2) // 32 * 32)
    wide = (imgsz * 5 // 4 + 31) // 32 * 32
    return [[half, half], [imgsz, imgsz], [imgsz, wide]]


def export_and_prove(weights: Path, onnx_path: Path, imgsz: int | None, batches: Sequence[int],
                     sizes: Sequence[Sequence[int]] | None, tolerance: float) -> dict:
    """Load the pose .pt, export it whole, prove parity; {labels, kpt_shape, schema, imgsz, parity, ms_per_image}."""
    model = load_torch_model(weights)
    if type(model.model[-1]).__name__ not in ("Pose",) and getattr(model, "task", "") != "pose":
        raise GateFailed(f"{Path(weights).name}: not an ultralytics pose model ({type(model.model[-1]).__name__})")
    labels, kpt_shape, schema = pose_facts(model)
    if imgsz is None:
        args = getattr(model, "args", {}) or {}
        imgsz = args.get("imgsz", 640) if isinstance(args, dict) else 640
        imgsz = int(max(imgsz)) if isinstance(imgsz, (list, tuple)) else int(imgsz)
    export_pose_onnx(weights, onnx_path, imgsz, len(labels), kpt_shape)
    parity = check_pose_parity(model, onnx_path, len(labels), kpt_shape, sizes or default_parity_sizes(imgsz),
                               batches, tolerance)
    ms = latency_ab(ort_session(onnx_path), [imgsz], runs=10)[imgsz]
    return {"labels": labels, "kpt_shape": kpt_shape, "schema": schema, "imgsz": imgsz, "parity": parity,
            "ms_per_image": ms}
