"""Shared fixtures: tiny models built by the real pipeline once per session, and a real `bentoml serve`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# One implementation of "a real bentoml serve on free loopback ports, stopped with its whole process tree".
from scripts.drills.server import Server, free_port  # noqa: F401 - re-exported to the test modules

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")
# Test servers serve the tiny models: one deployment per family, named after it (tests/fixtures/models.tiny.yaml).
TINY_MODELS = ROOT / "tests" / "fixtures" / "models.tiny.yaml"
os.environ["TRISERVE_MODELS_FILE"] = str(TINY_MODELS)

# configs/serving.yaml's per-task capacity limits are measured for the default models on the dev box (80% of the
# knee); test servers run tiny models and bursts, so they start without them (tests that need one set it).
NO_CAPACITY_LIMITS = {"TRISERVE_ACCESS__CAPACITY_LIMITS": "false"}


@pytest.fixture(scope="session")
def tiny_registry(tmp_path_factory):
    """Every task built with the 'tiny' recipes into a throw-away registry (aliases 'stable' set)."""
    from scripts.pipeline import build_task
    from triserve.models.registry import LocalRegistry

    root = tmp_path_factory.mktemp("registry")
    cache = tmp_path_factory.mktemp("cache")
    registry = LocalRegistry(root)
    for task in ("detection", "text", "forecast", "segmentation", "classification"):
        build_task(task, "tiny", registry, cache)
    return registry


@pytest.fixture(scope="session")
def tiny_png_b64() -> str:
    import base64
    import io

    from PIL import Image, ImageDraw

    img = Image.new("RGB", (96, 64), (20, 20, 20))
    ImageDraw.Draw(img).rectangle([10, 10, 50, 40], fill=(200, 30, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="session")
def server(tiny_registry, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("logs") / "serve.log"
    with Server(tiny_registry.root, env=NO_CAPACITY_LIMITS, log_path=log_path) as srv:
        srv.wait_ready()
        yield srv


@pytest.fixture(scope="session", autouse=True)
def _one_import_name():
    """After the whole session: no module of the checkout was loaded under a folder's bare name (`services.gateway`
    beside `triserve.services.gateway`: two copies of its state), whatever imported it (a string, a subprocess's
    pickle, a test)."""
    import sys

    yield
    root = str(Path(__file__).resolve().parents[1])
    twice = sorted(name for name, module in list(sys.modules.items())
                   if name.split(".")[0] in ("kernel", "services", "families", "observability", "runners", "models",
                                             "configs", "batch")
                   and str(getattr(module, "__file__", "") or "").startswith(root))
    assert not twice, f"modules imported under a bare folder name instead of triserve.<folder>: {twice[:20]}"
