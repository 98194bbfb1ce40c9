"""Reading an ultralytics detection export: its input, class names, size and head, checked by one probe run; anything
else is refused with the reason (ImportRefused). What is accepted: onnx_graph.py's docstring."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.detection.importers.end2end import check_values as check_end2end_values
from triserve.families.detection.importers.end2end import is_end2end_shape
from triserve.models.importing.graphs import export_labels, image_input, metadata_literal, ort_session, read_export
from triserve.models.importing.result import ImportRefused
from triserve.models.manifest import sha256_file


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

    inp, dims = image_input(model, path.name)
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
    labels, labels_from = export_labels(path.name, labels, meta, ": the ONNX has no 'names' metadata (not exported by "
                                        "ultralytics, or stripped); pass --labels FILE (one name per line, class-id "
                                        "order)")
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
