"""detection-pt with a checkpoint whose training script defined its own layer (issue 30): a YOLOv8n from yaml
(random weights, imgsz 64) whose third layer is C2fX, a C2f with a learnt output gain, written to a test module and
pickled as `__main__.C2fX` (as `python train.py` pickles it) or as `mytrain.layers.C2fX`. Without --custom-modules
the import is refused by name; with it the checkpoint imports, exports, passes parity and agrees with ultralytics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from triserve.families.detection.importers.checkpoint import PtParams, import_detection_pt
from triserve.families.detection.importers.checkpoint_read import inspect_checkpoint
from triserve.models.importing.custom_modules import custom_modules
from triserve.models.importing.result import GateFailed, ImportRefused
from triserve.models.registry import LocalRegistry

FAST = PtParams(parity_batches=(1, 2), parity_sizes=((64, 64),), proof_batches=(4, 2))
pytestmark = pytest.mark.timeout(300)

LAYERS = '''
import torch
from torch import nn
from ultralytics.nn.modules.block import C2f


class C2fX(C2f):
    """C2f with a learnt per-channel gain on its output."""

    def __init__(self, c1, c2, n=1, shortcut=False, g=1, e=0.5):
        super().__init__(c1, c2, n, shortcut, g, e)
        self.gain = nn.Parameter(torch.linspace(0.5, 2.0, c2).view(1, c2, 1, 1))

    def forward(self, x):
        return super().forward(x) * self.gain

    def forward_split(self, x):  # ultralytics' ONNX exporter runs every C2f through forward_split
        return super().forward_split(x) * self.gain
'''
# the same layer written as many users would: only forward overridden
FORWARD_ONLY = LAYERS.replace("    def forward_split(self, x):", "    def _unused(self, x):")


def _load_layers(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_train_script_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _calibrate(model) -> None:
    """BatchNorm statistics measured on a few scenes: at random init the activations shrink layer by layer (the
    output no longer depends on the input, nor on C2fX); calibrated, every layer's output matters, as trained."""
    import torch

    from triserve.families.detection.importers.export import parity_images

    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for seed in range(3):
            model(torch.from_numpy(parity_images(4, 64, 64, seed=seed)))
    for bn in bns:
        bn.momentum = 0.03
    model.eval()
    with torch.no_grad():  # class scores around 0.2-0.5 instead of the 1e-3 prior: ultralytics finds boxes to compare
        for branch in model.model[-1].cv3:
            branch[-1].bias.fill_(-1.0)


def save_custom_checkpoint(layers: Path, dst: Path, pickled_module: str = "__main__") -> Path:
    """yolov8n.yaml, nc 2, with layer 2 (a C2f) replaced by C2fX of the same shape; saved by ultralytics with C2fX
    pickled as `pickled_module`.C2fX, then forgotten (the loading process has never seen it)."""
    import torch
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel

    cls = _load_layers(layers).C2fX
    torch.manual_seed(0)
    user = YOLO("yolov8n.yaml")
    user.model = DetectionModel("yolov8n.yaml", nc=2, verbose=False)
    user.model.names = {0: "class0", 1: "class1"}
    old = user.model.model[2]
    new = cls(old.cv1.conv.in_channels, old.cv2.conv.out_channels, len(old.m), old.m[0].add, 1,
              old.c / old.cv2.conv.out_channels)
    for attr in ("i", "f", "type", "np"):
        setattr(new, attr, getattr(old, attr))
    user.model.model[2] = new
    _calibrate(user.model)
    parts = pickled_module.split(".")
    created = [".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) not in sys.modules]
    for name in created:
        sys.modules[name] = type(sys)(name)
    holder = sys.modules[pickled_module]
    cls.__module__ = pickled_module
    holder.C2fX = cls
    try:
        user.save(str(dst))
    finally:
        del holder.C2fX
        for name in created:
            del sys.modules[name]
    return dst


@pytest.fixture(scope="module")
def ul_cache(tmp_path_factory) -> Path:
    from triserve.families.detection.importers.ultralytics_env import setup_ultralytics

    cache = tmp_path_factory.mktemp("ultralytics-cache")
    setup_ultralytics(cache / "detection-pt")
    return cache


@pytest.fixture(scope="module")
def custom(ul_cache, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("custom")
    layers = root / "train" / "layers.py"
    layers.parent.mkdir()
    layers.write_text(LAYERS)
    forward_only = root / "train" / "layers_forward_only.py"
    forward_only.write_text(FORWARD_ONLY)
    return {"layers": layers, "forward_only": forward_only,
            "main": save_custom_checkpoint(layers, root / "c2fx_main.pt"),
            "pkg": save_custom_checkpoint(layers, root / "c2fx_pkg.pt", "mytrain.layers"),
            "main_forward_only": save_custom_checkpoint(forward_only, root / "c2fx_fwd.pt")}


def _nothing_left() -> bool:
    return not hasattr(sys.modules["__main__"], "C2fX") and not [
        m for m in sys.modules if m.startswith("triserve_custom_") or m.split(".")[0] == "mytrain"]


def test_a_main_class_is_refused_by_name_with_the_flag_to_pass(custom, tmp_path, ul_cache):
    with pytest.raises(ImportRefused, match=r"__main__\.C2fX \(defined by the training script itself\): pass "
                                            r"--custom-modules FILE\.py"):
        inspect_checkpoint(custom["main"], tmp_path, ul_cache)
    with pytest.raises(ImportRefused, match=r"mytrain\.layers\.C2fX \(module 'mytrain\.layers' is not installed\).*"
                                            r"--custom-modules mytrain\.layers=FILE\.py"):
        inspect_checkpoint(custom["pkg"], tmp_path, ul_cache)
    assert _nothing_left()


def test_the_pickled_module_name_reads_with_an_alias(custom, tmp_path, ul_cache):
    with custom_modules([f"mytrain.layers={custom['layers']}"]):
        info = inspect_checkpoint(custom["pkg"], tmp_path, ul_cache)
    assert info.task == "detect" and info.nc == 2 and _nothing_left()


def test_cli_refuses_without_and_imports_with_custom_modules(custom, tmp_path, ul_cache, photo_dir, capsys, caplog):
    """The whole import with the custom layer: read, ONNX export, torch-vs-ORT parity, ultralytics' predictor on the
    original checkpoint; the manifest records the file that ran."""
    from triserve.families.detection.importers.export import load_torch_model, parity_images
    from triserve.importers import main
    from triserve.models.importing.graphs import ort_session

    reg = tmp_path / "registry"
    common = ["--weights", str(custom["main"]), "--name", "c2fx", "--version", "1", "--registry", str(reg),
              "--imgsz", "64", "--cache", str(ul_cache), "--parity-batches", "1", "2", "--images", str(photo_dir)]
    assert main(["detection-pt", *common]) == 2
    assert "__main__.C2fX" in caplog.text and "--custom-modules" in caplog.text
    assert LocalRegistry(reg).models() == []
    capsys.readouterr()
    assert main(["detection-pt", *common, "--custom-modules", str(custom["layers"])]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gates"] == {"parity": True, "dynamic_batch": True, "ultralytics_agreement": True}
    directory, m = LocalRegistry(reg).load_verified("c2fx", "1")
    (recorded,) = m.source.recipe["custom_modules"]
    assert recorded["file"] == "layers.py" and recorded["exported"] == ["C2fX"] and len(recorded["sha256"]) == 64
    assert all(c.passed for c in m.parity) and m.gates["ultralytics_agreement"]
    # not vacuous: ultralytics' predictor found boxes on the photos (about 20 per photo) and every one was matched
    assert m.metrics["ultralytics_boxes"] >= 6 and m.metrics["ultralytics_matched"] == m.metrics["ultralytics_boxes"]
    assert _nothing_left()
    # the served graph computes the custom layer: it equals the torch model with C2fX, not the one without its gain
    x = parity_images(2, 64, 64)
    served = ort_session(directory / m.model_file).run(None, {"images": x})[0]
    with custom_modules([str(custom["layers"])]):
        import torch

        model = load_torch_model(custom["main"])
        with torch.inference_mode():
            ref = model(torch.from_numpy(x))[0].numpy()
            model.model[2].gain.fill_(1.0)
            plain = model(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(served[:, :4], ref[:, :4], atol=1e-4 * 64, rtol=0)
    np.testing.assert_allclose(served[:, 4:], ref[:, 4:], atol=1e-4, rtol=0)
    assert np.abs(served[:, :4] - plain[:, :4]).max() > 0.5  # pixels: the gain moves the boxes


def test_a_c2f_subclass_that_overrides_only_forward_fails_parity(custom, tmp_path, ul_cache):
    """ultralytics' exporter replaces every C2f's forward with forward_split: a subclass that changes forward alone
    is exported without its change. The parity gate catches it: nothing would be published."""
    with pytest.raises(GateFailed, match="parity gate failed"):
        import_detection_pt(custom["main_forward_only"], "fwd", "1", tmp_path / "work", imgsz=64, cache_dir=ul_cache,
                            photos=None, verify_ultralytics=False, params=FAST,
                            custom_modules=[str(custom["forward_only"])])
    assert _nothing_left()


def test_a_legacy_format_checkpoint_is_refused_by_name_too(custom, tmp_path, ul_cache):
    """torch's pre-1.6 (non-zip) format is not scanned: the loader's "Can't get attribute" becomes the same refusal."""
    import torch

    legacy = tmp_path / "legacy.pt"
    module = _load_layers(custom["layers"])
    module.C2fX.__module__ = "__main__"
    main = sys.modules["__main__"]
    main.C2fX = module.C2fX
    try:
        ckpt = torch.load(str(custom["main"]), map_location="cpu", weights_only=False)
        torch.save(ckpt, str(legacy), _use_new_zipfile_serialization=False)
    finally:
        del main.C2fX
    with pytest.raises(ImportRefused, match=r"__main__\.C2fX \(defined by the training script itself\): pass "
                                            r"--custom-modules FILE\.py"):
        inspect_checkpoint(legacy, tmp_path / "work", ul_cache)
    with custom_modules([str(custom["layers"])]):
        assert inspect_checkpoint(legacy, tmp_path / "work2", ul_cache).task == "detect"
    assert _nothing_left()
