"""Text classifiers from torch to ONNX: the TorchScript exporter (torch.onnx.export, dynamo=False: no onnxscript
needed), dynamic 'batch' and 'sequence' axes, one output 'probabilities'. torch is imported inside (the export
extra). The text-hf and text-sklearn importers export with it, and so does the pipeline's intent model
(scripts/text/fused.py)."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

OPSET = 17


def export_probabilities(wrapped, path: Path, input_names: Sequence[str], example: dict[str, np.ndarray],
                         opset: int = OPSET) -> Path:
    """torch.onnx (TorchScript exporter) with dynamic batch and sequence axes: (input_ids, attention_mask[,
    token_type_ids]) -> probabilities, traced on `example` feeds."""
    import torch

    args = tuple(torch.from_numpy(example[n]) for n in input_names)
    axes = {n: {0: "batch", 1: "sequence"} for n in input_names} | {"probabilities": {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, args, str(path), input_names=list(input_names), output_names=["probabilities"],
                          dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
    return Path(path)


def export_onnx(model, path: Path, opset: int, example_len: int = 16) -> Path:
    """(input_ids, attention_mask) -> probabilities, traced to ONE ONNX graph with dynamic batch and sequence axes
    (TorchScript exporter: no onnxscript needed) on two example rows of `example_len` ids, one half masked."""
    import torch

    ids = torch.full((2, example_len), 1000, dtype=torch.long)
    mask = torch.ones((2, example_len), dtype=torch.long)
    mask[1, example_len // 2:] = 0
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "probabilities": {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings and the legacy-exporter deprecation notice
        torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                          output_names=["probabilities"], dynamic_axes=axes, opset_version=opset,
                          do_constant_folding=True, dynamo=False)
    return path
