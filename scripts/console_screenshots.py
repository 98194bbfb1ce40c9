"""Screenshots of every console page (services/console) for the docs, in one command, and the demo server they (and
the browser tests, tests/services/console/) are taken against:

    python -m scripts.console_screenshots       # -> docs/assets/console/*.png (1280x800), phone.png (390x844)

It builds the tiny models (scripts/pipeline.py --profile tiny) into a throw-away registry, adds a tiny pose model
(random-init yolo11n-pose, when torch and ultralytics are installed: the export extra), a copy of the text model
whose labels are markup (the XSS case: the console must show them as text) and a forecaster version for the canary,
starts a real `bentoml serve` on loopback ports with an admin key, sends a few requests, and drives the system
Chromium (Debian package chromium; never a browser download) through Playwright.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scripts.imagetools import system_tool

ROOT = Path(__file__).resolve().parent.parent
TINY_MODELS = ROOT / "tests" / "fixtures" / "models.tiny.yaml"
ADMIN_KEY = "console-admin"
XSS_LABEL = "<img src=x onerror=window.__xss=1>"
XSS_DESCRIPTION = "labels are markup: <img src=x onerror=window.__xss=2>"
TEXT_XSS_VERSION = "9.0.0-markup"
FORECAST_CANARY = "2.0.0-candidate"
PAGES = ("repository", "try/detection", "try/pose", "try/segmentation", "try/text", "try/forecast", "rollouts")


def chromium() -> str:
    """The system Chromium (Debian package chromium), by absolute path; StepFailed names the package when missing."""
    return system_tool("chromium", "chromium")


def _republish(registry, name: str, version: str, **changes) -> str:
    """The stable artifact of `name` again as `version`, its manifest changed (same weights)."""
    src, manifest = registry.load_verified(name, "stable")
    staging = Path(tempfile.mkdtemp(prefix=f"console-{name}-"))
    shutil.copytree(src, staging, dirs_exist_ok=True)
    registry.publish(staging, manifest.model_copy(update={"version": version, **changes}))
    shutil.rmtree(staging, ignore_errors=True)
    return version


def _pose_model(registry, work: Path) -> bool:
    """A tiny random-init pose model (yolo11n-pose at imgsz 64) as pose-tiny:stable; False without torch/ultralytics."""
    try:
        import torch
        from ultralytics import YOLO
    except ImportError:
        return False
    from families.pose.importers.checkpoint import PosePtParams, import_pose_pt

    torch.manual_seed(0)
    user = YOLO("yolo11n-pose.yaml")
    model_class: Any = type(user.model)  # ultralytics' PoseModel, random weights, one class
    pose = model_class("yolo11n-pose.yaml", nc=1, verbose=False)
    pose.names = {0: "person"}
    user.model = pose
    work.mkdir(parents=True, exist_ok=True)
    user.save(str(work / "pose.pt"))
    art, _ = import_pose_pt(work / "pose.pt", "pose-tiny", "1.0.0", work / "import", imgsz=64,
                            cache_dir=work / "cache", verify_ultralytics=False,
                            params=PosePtParams(parity_batches=(1,), parity_sizes=((64, 64),)))
    registry.publish(art.staging, art.manifest)
    registry.set_alias("pose-tiny", "stable", "1.0.0", by="console")
    return True


def prepare(root: Path, tiny_registry: Path | None = None) -> tuple[Path, Path]:
    """A registry under root (a copy of tiny_registry, else built here) with the console's demo models added, and the
    models file serving it: (registry dir, models file)."""
    from models.registry import LocalRegistry

    registry_dir = root / "registry"
    if tiny_registry is not None:
        shutil.copytree(tiny_registry, registry_dir)
    registry = LocalRegistry(registry_dir)
    if tiny_registry is None:
        from scripts.pipeline import build_task

        for task in ("detection", "text", "forecast", "segmentation"):
            build_task(task, "tiny", registry, root / "cache")
    _, text = registry.load_verified("minilm-intent", "stable")
    _republish(registry, "minilm-intent", TEXT_XSS_VERSION, labels=[f"{XSS_LABEL}{label}" for label in text.labels])
    _republish(registry, "forecast-global", FORECAST_CANARY)
    models = TINY_MODELS.read_text()
    if _pose_model(registry, root / "pose"):
        models += ("  - name: pose\n    family: pose\n"
                   "    model: {name: pose-tiny, ref: stable, batching: {max_batch_size: 4}}\n")
    models += (f"  - name: markup\n    family: text\n    description: {json.dumps(XSS_DESCRIPTION)}\n"
               f"    model: {{name: minilm-intent, ref: {TEXT_XSS_VERSION}, batching: {{max_batch_size: 8}}}}\n")
    models_file = root / "models.yaml"
    models_file.write_text(models)
    return registry_dir, models_file


def server_env(models_file: Path) -> dict[str, str]:
    """The demo server's settings: the models file, an admin key, no capacity limits (tiny models, bursts)."""
    return {"TRISERVE_MODELS_FILE": str(models_file), "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
            "TRISERVE_ROLLOUT__REFRESH_S": "0.5",
            "TRISERVE_ACCESS__API_KEYS": json.dumps([{"name": "console", "admin": True,
                                                      "sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest()}])}


@contextmanager
def demo_server(root: Path, tiny_registry: Path | None = None, log_path: Path | None = None) -> Iterator:
    """A real `bentoml serve` of the demo registry, ready."""
    from scripts.drills.server import Server

    registry_dir, models_file = prepare(root, tiny_registry)
    with Server(registry_dir, env=server_env(models_file), log_path=log_path) as srv:
        srv.wait_ready()
        yield srv


def run_page(page, name: str) -> None:
    """Open a console page and do what it is for (run the try-it on the sample / default input)."""
    page.goto(f"/console/#/{name}")  # relative to the context's base_url
    page.wait_for_selector("#console-ready", state="attached")
    if name == "repository":
        page.wait_for_selector("#repo-status[data-refreshes]")
    elif name == "rollouts":
        page.wait_for_selector("[data-slot]")
    elif name in ("try/detection", "try/pose", "try/segmentation"):
        page.wait_for_selector("#deployment option", state="attached")
        page.click("#sample")
        page.wait_for_selector("#run:not([disabled])")
        page.fill("#conf", "0.001")
        page.fill("#max-detections", "3")
        page.click("#run")
        page.wait_for_selector("#tryit-status[data-state=done]")
    else:
        page.wait_for_selector("#deployment option", state="attached")
        page.click("#run")
        page.wait_for_selector("#tryit-status[data-state=done]")
        if name == "try/forecast":
            page.click("#panel-run")
            page.wait_for_selector("#panel-status[data-state=done]")


def screenshots(url: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        for name, viewport in [(n, (1280, 800)) for n in PAGES] + [("phone", (390, 844))]:
            context = browser.new_context(base_url=url, viewport={"width": viewport[0], "height": viewport[1]})
            context.add_init_script(f"sessionStorage.setItem('triserve.adminKey', {json.dumps(ADMIN_KEY)})")
            page = context.new_page()
            run_page(page, "repository" if name == "phone" else name)
            path = out / f"{name.replace('try/', 'try-')}.png"
            page.screenshot(path=str(path), full_page=name != "phone")
            shots.append(path)
            context.close()
        browser.close()
    return shots


def warm_up(url: str) -> None:
    """A few requests so the repository page has figures to show."""
    import httpx

    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(8):
            client.post("/v1/classify", json={"texts": [f"book a flight to paris {i}"]}).raise_for_status()
            client.post("/v1/forecast", json={"values": [float(v % 7) for v in range(40)],
                                              "start": "2026-01-01T00:00:00", "frequency": "D"}).raise_for_status()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "console", help="where the PNGs go")
    args = parser.parse_args(argv)
    chromium()  # fail before building anything when the browser is missing
    with tempfile.TemporaryDirectory(prefix="console-shots-") as tmp, demo_server(Path(tmp)) as srv:
        warm_up(srv.url)
        for path in screenshots(srv.url, args.out):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path, f"{path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
