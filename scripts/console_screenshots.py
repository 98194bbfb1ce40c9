"""Screenshots of every console page (services/console) for the docs, in one command, and the demo server they (and
the browser tests, tests/services/console/) are taken against:

    python -m scripts.console_screenshots       # -> docs/assets/console/*.png (1280x800), phone.png (390x844)

It builds the tiny models (scripts/pipeline.py --profile tiny) into a throw-away registry, adds a tiny pose model
(random-init yolo11n-pose, when torch and ultralytics are installed: the export extra), a copy of the text model
whose labels are markup (the XSS case: the console must show them as text) and a forecaster version for the canary,
starts a real `bentoml serve` on loopback ports with an admin key and an inference key (require_key_for_inference
on: the console must work with the keys typed in and show the refusals without them), sends a few requests, and
drives the system Chromium (Debian package chromium; never a browser download) through Playwright. The PNGs are
palette-quantised and optimised with Pillow (they are committed: small).
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
USER_KEY = "console-user"  # an inference key (not admin): the demo server requires a key for inference
XSS_LABEL = "<img src=x onerror=window.__xss=1>"
XSS_DESCRIPTION = "labels are markup: <img src=x onerror=window.__xss=2>"
TEXT_XSS_VERSION = "9.0.0-markup"
FORECAST_CANARY = "2.0.0-candidate"
PAGES = ("repository", "try/detection", "try/pose", "try/segmentation", "try/classification", "try/text",
         "try/forecast", "rollouts")
DESKTOP, PHONE = (1280, 800), (390, 844)
# every screenshot: (file name, page, viewport, keys in the tab: "admin" both keys, "user" the inference key only,
# "none" no key); the pages with both keys, then the states without them
SHOTS = ([(name.replace("try/", "try-"), name, DESKTOP, "admin") for name in PAGES]
         + [("rollouts-read-only", "rollouts", DESKTOP, "user"), ("key-required", "try/text", DESKTOP, "none"),
            ("phone", "repository", PHONE, "admin")])


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
    from triserve.families.pose.importers.checkpoint import PosePtParams, import_pose_pt

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
    from triserve.models.registry import LocalRegistry

    registry_dir = root / "registry"
    if tiny_registry is not None:
        shutil.copytree(tiny_registry, registry_dir)
    registry = LocalRegistry(registry_dir)
    if tiny_registry is None:
        from scripts.pipeline import build_task

        for task in ("detection", "text", "forecast", "segmentation", "classification"):  # as tests/conftest.py
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
    """The demo server's settings: the models file, an admin key and an inference key with require_key_for_inference
    on (so metadata and metrics need a key too), no capacity limits (tiny models, bursts)."""
    keys = [{"name": "console", "admin": True, "sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest()},
            {"name": "user", "sha256": hashlib.sha256(USER_KEY.encode()).hexdigest()}]
    return {"TRISERVE_MODELS_FILE": str(models_file), "TRISERVE_ACCESS__CAPACITY_LIMITS": "false",
            "TRISERVE_ROLLOUT__REFRESH_S": "0.5", "TRISERVE_ACCESS__REQUIRE_KEY_FOR_INFERENCE": "true",
            "TRISERVE_ACCESS__API_KEYS": json.dumps(keys)}


def key_script(keys: str) -> str:
    """An init script that puts the keys in the tab's sessionStorage, as typing them into the page's header does."""
    stored = {"admin": {"triserve.apiKey": USER_KEY, "triserve.adminKey": ADMIN_KEY},
              "user": {"triserve.apiKey": USER_KEY}, "none": {}}[keys]
    sets = "".join(f"sessionStorage.setItem({json.dumps(k)}, {json.dumps(v)});" for k, v in stored.items())
    return f"if (location.protocol.startsWith('http')) {{ {sets} }}"  # about:blank has no sessionStorage


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
    elif name in ("try/detection", "try/pose", "try/segmentation", "try/classification"):
        page.wait_for_selector("#deployment option", state="attached")
        page.click("#sample")
        page.wait_for_selector("#run:not([disabled])")
        if name == "try/classification":
            page.fill("#top-k", "3")
        else:
            page.fill("#conf", "0.001")
            page.fill("#max-detections", "3")
        page.click("#run")
        page.wait_for_selector("#tryit-status[data-state=done]")
    else:
        page.wait_for_selector("#deployment option", state="attached")
        if name == "try/forecast":
            page.fill("#horizon", "6")  # three backtest origins of 6 steps fit the sample's 48 points
        page.click("#run")
        page.wait_for_selector("#tryit-status[data-state=done]")
        if name == "try/forecast":
            page.click("#backtest-run")
            page.wait_for_selector("#backtest-status[data-state=done]")
            page.click("#panel-run")
            page.wait_for_selector("#panel-status[data-state=done]")


def run_without_key(page) -> None:
    """The text try-it in a tab without a key: the deployments' listing and the run show the server's refusal."""
    page.goto("/console/#/try/text")
    page.wait_for_selector("#tryit-status[data-state=refused]")
    page.click("#run")
    page.wait_for_selector("#tryit-status[data-state=error]")


def set_canary_from_the_page(page) -> None:
    """On the rollouts page (admin key): a canary on forecast, confirmed, so the server's answer shows."""
    page.once("dialog", lambda dialog: dialog.accept())
    slot = page.locator("[data-slot=forecast]")
    slot.locator("input[name=canary-ref]").fill(FORECAST_CANARY)
    slot.locator("input[name=canary-weight]").fill("0.2")
    slot.locator("button", has_text="Set canary").click()
    page.wait_for_selector("#rollout-answer [data-status]")


def compress(png: bytes, path: Path) -> None:
    """A screenshot as a small PNG: at most 1280 wide, 256-colour palette, optimised (UI pixels survive that)."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > 1280:
        image = image.resize((1280, round(image.height * 1280 / image.width)), Image.Resampling.LANCZOS)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)


def screenshots(url: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        for name, page_name, (width, height), keys in SHOTS:
            context = browser.new_context(base_url=url, viewport={"width": width, "height": height})
            context.add_init_script(key_script(keys))
            page = context.new_page()
            if keys == "none":
                run_without_key(page)
            else:
                run_page(page, page_name)
            if name == "rollouts":
                set_canary_from_the_page(page)
            path = out / f"{name}.png"
            compress(page.screenshot(full_page=width == DESKTOP[0]), path)
            shots.append(path)
            context.close()
        browser.close()
    return shots


def warm_up(url: str) -> None:
    """A few requests so the repository page has figures to show."""
    import httpx

    with httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": USER_KEY}) as client:
        for i in range(8):
            client.post("/v1/classify", json={"texts": [f"book a flight to paris {i}"]}).raise_for_status()
            client.post("/v1/forecast", json={"values": [float(v % 7) for v in range(40)],
                                              "start": "2026-01-01T00:00:00", "frequency": "D"}).raise_for_status()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "console", help="where the PNGs go")
    args = parser.parse_args(argv)
    chromium()  # fail before building anything when the browser is missing
    with tempfile.TemporaryDirectory(prefix="console-shots-") as tmp, \
            demo_server(Path(tmp), log_path=ROOT / ".cache" / "console_screenshots.log") as srv:  # the server's log
        warm_up(srv.url)
        for path in screenshots(srv.url, args.out):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path, f"{path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
