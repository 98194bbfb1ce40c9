"""classification-pt on a small ultralytics -cls checkpoint (yolov8n-cls.yaml, 5 classes, seeded random weights,
imgsz 64): exported and verified against ultralytics' own predictor on its real photos (bus.jpg, zidane.jpg and
crops of them): top-5 identical, probabilities within 1e-4; the detection importer points -cls checkpoints here."""
from __future__ import annotations

import shutil

import pytest

pytest.importorskip("ultralytics")


@pytest.fixture(scope="module")
def cls_checkpoint(tmp_path_factory):
    import torch
    from ultralytics.nn.tasks import ClassificationModel

    torch.manual_seed(0)
    model = ClassificationModel("yolov8n-cls.yaml", nc=5, verbose=False).eval()
    with torch.no_grad():  # random weights saturate the softmax: scaled, the five classes all get a share
        model.model[-1].linear.weight.mul_(0.02)
    model.names = {i: n for i, n in enumerate(["cat", "dog", "bus", "person", "tie"])}
    model.args = {"task": "classify", "imgsz": 64}
    path = tmp_path_factory.mktemp("cls") / "tiny-cls.pt"
    torch.save({"model": model, "train_args": {"task": "classify", "imgsz": 64}, "version": "test"}, path)
    return path


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory):
    from PIL import Image

    from triserve.models.importing.photos import ultralytics_assets

    root = tmp_path_factory.mktemp("photos")
    for p in ultralytics_assets():
        shutil.copy(p, root / p.name)
        with Image.open(p) as im:
            w, h = im.size
            im.crop((0, 0, w // 2, h // 2)).save(root / f"crop-{p.stem}.png")
    return root


def test_verified_against_ultralytics_predictor(cls_checkpoint, photo_dir, tmp_path):
    from triserve.families.classification.importers.checkpoint import import_classification_pt
    from triserve.models.importing.photos import user_photos

    result = import_classification_pt(cls_checkpoint, "tiny-cls", "1.0.0", tmp_path / "work", user_photos(photo_dir),
                                      tmp_path / "cache")
    check = result.report["verify"]
    assert check["passed"] and check["max_abs_diff"] <= 1e-4
    assert all(v["top1_prob"] < 0.99 for v in check["photos"].values())  # a real distribution, not a one-hot
    assert {"bus.jpg", "zidane.jpg"} <= {k.rsplit("/", 1)[-1] for k in check["photos"]}
    assert all(v["top_identical"] for v in check["photos"].values())
    m = result.primary.manifest
    assert m.labels == ["cat", "dog", "bus", "person", "tie"] and m.preprocess.imgsz == 64
    assert m.preprocess.output == "probabilities" and m.task == "classification"


def test_the_command_imports_in_the_isolated_child_with_the_same_result(cls_checkpoint, photo_dir, tmp_path, capsys):
    """`triserve import classification-pt` reads the pickle in the sandbox (models/importing/sandbox.py): the
    published graph and manifest are what the in-process import stages."""
    import json

    from triserve.families.classification.importers.checkpoint import import_classification_pt
    from triserve.importers import main
    from triserve.models.importing.photos import user_photos
    from triserve.models.registry import LocalRegistry

    reg = tmp_path / "registry"
    assert main(["classification-pt", "--weights", str(cls_checkpoint), "--name", "tiny-cls", "--version", "1.0.0",
                 "--registry", str(reg), "--images", str(photo_dir), "--cache", str(tmp_path / "cache"),
                 "--license", "MIT"]) == 0
    report = json.loads(capsys.readouterr().out)["report"]
    assert report["sandbox"]["filesystem"] in ("writes only beneath the work folder", "not fenced (no Landlock here)")
    directory, published = LocalRegistry(reg).load_verified("tiny-cls", "1.0.0")
    local = import_classification_pt(cls_checkpoint, "tiny-cls", "1.0.0", tmp_path / "work", user_photos(photo_dir),
                                     tmp_path / "cache" / "classification-pt", license="MIT").primary
    assert published.labels == local.manifest.labels and published.preprocess == local.manifest.preprocess
    assert published.metrics == local.manifest.metrics and published.parity == local.manifest.parity
    import onnx  # the same graph; its metadata holds the export's date

    graphs = [onnx.load(str(p)).graph for p in (directory / published.model_file,
                                                local.staging / local.manifest.model_file)]
    assert graphs[0].SerializeToString() == graphs[1].SerializeToString()


def test_a_detection_checkpoint_is_refused_and_the_detection_importer_names_this_one(tmp_path):
    from triserve.families.detection.importers.checkpoint_read import REFUSED_TASKS

    assert "classification-pt" in REFUSED_TASKS["classify"]
