"""The wheel serves (issue 28 part 1): build it from this checkout, install it into a fresh venv outside the checkout,
start `triserve serve` from there against a registry store and answer every family it serves over HTTP.

The fresh venv borrows its third-party packages from the project's environment (a .pth line naming that
site-packages: its own .pth files, the editable hook of this checkout among them, are not processed), so the test
needs no network; that those packages are what the wheel asks for is checked from the wheel's own metadata.
"""
from __future__ import annotations

import base64
import email
import functools
import http.server
import io
import json
import shutil
import subprocess
import sys
import sysconfig
import threading
import zipfile
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from PIL import Image

from tests.conftest import NO_CAPACITY_LIMITS, TINY_MODELS, Server

ROOT = Path(__file__).resolve().parents[2]
# the checkout's product folders; the wheel holds each under triserve/ (triserve/<folder> links to it in the checkout)
FOLDERS = ("kernel", "services", "families", "observability", "runners", "models", "configs", "batch")
# what the server reads at run time, and the operator's files that go with it
DATA_FILES = tuple(f"triserve/{name}" for name in (
    "configs/serving.yaml", "configs/models.yaml", "models/manifest.schema.json",
    "services/protocols/protos/triserve.proto", "services/protocols/protos/grpc_predict_v2.proto",
    "configs/deploy/k8s/deployment.yaml", "configs/grafana/triserve-dashboard.json", "configs/prometheus/alerts.yml",
    "services/console/static/index.html", "services/console/static/app.js", "services/console/static/console.css"))


def source_files() -> list[str]:
    """The files a fresh clone of this working tree has (tracked + new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True, timeout=60).stdout.decode()
    return [name for name in listed.split("\0") if name and ((ROOT / name).is_file() or (ROOT / name).is_symlink())]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of what a fresh clone holds: setuptools reuses a stale build/ of an in-tree build."""
    out = tmp_path_factory.mktemp("dist")
    tree = tmp_path_factory.mktemp("tree")
    for name in source_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name, follow_symlinks=False)  # triserve/<folder> stay links
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(tree)], capture_output=True, text=True, timeout=600, cwd=tree)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("triserve-*.whl")
    return found


def test_wheel_holds_the_product_its_data_and_its_licence(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(zf.read(f"{dist_info}/METADATA"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
    tops = {n.split("/")[0] for n in names if not n.startswith(dist_info)}
    assert tops == {"triserve"}, tops  # one import name: no scripts/, tests/, client/, no generic top-level names
    modules = {n if n.startswith("triserve/") else f"triserve/{n}" for n in source_files()
               if n.endswith((".py", ".pyi")) and n.split("/")[0] in ("triserve", *FOLDERS)}
    assert modules and not modules - names, sorted(modules - names)  # every module of the product, none left out
    for path in DATA_FILES:
        assert path in names, path
    assert not [n for n in names if n.startswith("triserve/models/store/") or n.endswith((".onnx", ".pt", ".pyc"))]
    assert meta["License-Expression"] == "Apache-2.0"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "triserve = triserve.cli:main" in entry_points
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    assert any(r.name == "protobuf" and "<7" in str(r.specifier) for r in requires)


def test_installing_the_wheels_adds_exactly_two_import_names(fresh_venv, tmp_path):
    """The server wheel and the client add `triserve` and `triserve_client` to site-packages and nothing else: no
    generic name (models, configs, services) that a user's own project could clash with."""
    client = shutil.copytree(ROOT / "client", tmp_path / "client",
                             ignore=shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__"))
    python = fresh_venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", "--no-build-isolation", str(client)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    names = {p.name.removesuffix(".py") for p in site.iterdir()
             if not p.name.endswith((".dist-info", ".pth")) and p.name != "__pycache__"}
    assert names == {"triserve", "triserve_client"}, sorted(names)


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("fresh-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def test_installed_wheel_imports_from_site_packages_with_its_requirements_met(fresh_venv, tmp_path):
    probe = ("import importlib.metadata as m, json, triserve.services as services, triserve.configs.settings as s\n"
             "import triserve.services.gateway, triserve.runners.service  # the two BentoML services\n"
             "from packaging.requirements import Requirement\n"
             "unmet = [str(r) for r in map(Requirement, m.requires('triserve')) if r.marker is None or "
             "r.marker.evaluate({'extra': 'cpu'})\n"
             "         if not r.specifier.contains(m.version(r.name), prereleases=True)]\n"
             "print(json.dumps({'services': services.__file__, 'wheel': s.installed_as_wheel(),\n"
             "                  'registry': str(s.Settings().registry_dir), 'unmet': unmet,\n"
             "                  'config': str(s.DEFAULT_CONFIG), 'config_exists': s.DEFAULT_CONFIG.is_file()}))\n")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    done = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["services"].startswith(str(fresh_venv)), got  # the wheel's copy, not this checkout
    assert got["wheel"] is True and got["config_exists"] is True, got
    assert got["registry"] == str(tmp_path / ".triserve" / "models"), got  # writable state never in site-packages
    assert got["unmet"] == [], got


def test_installed_wheel_imports_a_users_model(fresh_venv, tmp_path):
    """`triserve import` is the product's (the families' importers, models/importing): from the fresh venv, outside
    the checkout, it lists every kind and imports a user's ONNX forecaster into a registry directory."""
    from tests.families.forecast.importers.test_onnx_graph import window_graph

    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    triserve = str(fresh_venv / "bin" / "triserve")
    helped = subprocess.run([triserve, "import", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0, helped.stderr[-3000:]
    for kind in ("detection-onnx", "coco-default", "detection-pt", "text-hf", "text-onnx", "text-sklearn",
                 "forecast-onnx"):
        assert kind in helped.stdout, kind
    registry = tmp_path / "registry"
    done = subprocess.run([triserve, "import", "forecast-onnx", "--model", str(window_graph(tmp_path / "w.onnx")),
                           "--frequencies", "h", "--name", "user-window", "--version", "1.0.0", "--registry",
                           str(registry), "--license", "MIT"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["published"][0]["name"] == "user-window"
    assert (registry / "user-window").is_dir()


def test_installed_wheel_runs_rollout(fresh_venv, tmp_path):
    """`triserve rollout` is the product's (triserve/rollout.py), not a checkout tool: from the fresh venv it answers
    --help, and against a port nobody serves it says so in one line, exit status 1."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    triserve = str(fresh_venv / "bin" / "triserve")
    helped = subprocess.run([triserve, "rollout", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: triserve rollout "), helped.stderr[-3000:]
    down = subprocess.run([triserve, "rollout", "--url", "http://127.0.0.1:9", "status"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 1 and down.stderr.startswith("triserve rollout status: GET http://127.0.0.1:9/admin/"
                                                           "models failed: ConnectError"), down.stderr[-3000:]


@pytest.fixture
def http_store(tiny_registry):
    """The session's tiny registry as a static HTTP tree store (models/stores/tree.py's layout is the registry's),
    on 127.0.0.1, stopped when the test ends."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tiny_registry.root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_installed_wheel_serves_every_family(fresh_venv, http_store, tmp_path):
    """`triserve serve` of the fresh venv, run from a directory outside the checkout, pulls the models from a
    registry store over HTTP (sha256-verified into the default cache under ~/.triserve, never site-packages) and
    answers detection, text, forecasting, segmentation and image classification."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "models.yaml").write_text(TINY_MODELS.read_text())
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {**NO_CAPACITY_LIMITS, "HOME": str(home), "TRISERVE_MODELS_FILE": str(tmp_path / "absent.yaml"),
           "TRISERVE_DEPLOYMENTS_STATE_FILE": str(tmp_path / "state.json")}
    command = [str(fresh_venv / "bin" / "triserve"), "serve", "--registry", http_store,
               "--config-dir", str(config)]
    with Server(tmp_path / "absent-registry", env=env, log_path=tmp_path / "serve.log", root=elsewhere,
                command=command) as srv:
        srv.wait_ready(timeout=180)
        text = httpx.post(f"{srv.url}/v1/classify", json={"texts": ["book a flight to paris"]}, timeout=30)
        assert text.status_code == 200, text.text
        assert text.json()["model"]["name"] == "minilm-intent" and len(text.json()["results"]) == 1
        forecast = httpx.post(f"{srv.url}/v1/forecast", timeout=30, json={
            "values": [10.0 * i for i in range(1, 31)], "frequency": "D", "start": "2020-01-01T00:00:00",
            "horizon": 3})
        assert forecast.status_code == 200, forecast.text
        assert [p["point"] for p in forecast.json()["forecast"]] == pytest.approx([310, 320, 330], rel=0.01)
        image = io.BytesIO()
        Image.new("RGB", (64, 48), (20, 20, 20)).save(image, format="PNG")
        detect = httpx.post(f"{srv.url}/v1/detect", timeout=30,
                            json={"images": [{"data": base64.b64encode(image.getvalue()).decode()}]})
        assert detect.status_code == 200, detect.text
        assert detect.json()["model"]["name"] == "yolo-shapes"
        assert (detect.json()["results"][0]["width"], detect.json()["results"][0]["height"]) == (64, 48)
        segment = httpx.post(f"{srv.url}/v1/segment", timeout=30,
                             json={"images": [{"data": base64.b64encode(image.getvalue()).decode()}]})
        assert segment.status_code == 200 and segment.json()["model"]["name"] == "seg-tiny", segment.text
        image_class = httpx.post(f"{srv.url}/v1/classify-image", timeout=30,
                                 json={"images": [{"data": base64.b64encode(image.getvalue()).decode()}]})
        assert image_class.status_code == 200 and len(image_class.json()["results"][0]["top_k"]) >= 1, image_class.text
        console = httpx.get(f"{srv.url}/console/static/app.js", timeout=10)  # the web console, from site-packages
        assert console.status_code == 200 and "script-src 'self'" in console.headers["content-security-policy"]
        served = {d["name"] for d in httpx.get(f"{srv.url}/v1/models", timeout=10).json()["deployments"]}
        assert served == {"detection", "text", "forecast", "segmentation", "classification"}, served
    cache = home / ".triserve" / ".cache" / "models"
    assert {"minilm-intent", "yolo-shapes", "forecast-global"} <= {p.name for p in cache.iterdir()}, cache
    assert not list(fresh_venv.rglob(".cache")), "the installed server wrote into its venv"
