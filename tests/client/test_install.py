"""triserve-client alone: `pip install ./client` into a fresh venv (no server package importable there), then the
README's Python client example, run in that venv against the live session server.

The example is taken from README.md ("### Python client", its python block) so the README cannot rot; only its
`URL, IMAGE = ...` line is replaced (the test server's address, a PNG written here). Wall time ~9 s here: the venv,
the install (build isolation fetches setuptools; httpx, pydantic, tenacity and their few dependencies), the example.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.test_gateway import png_bytes

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("services", "families", "configs", "runners", "observability", "bentoml", "numpy")
# After the example: its results as JSON, to assert on (the example's own names: r, dets, fc).
REPORT = """
import json as _json
print("REPORT " + _json.dumps({"classify": r.model_dump(mode="json"), "detect": dets.model_dump(mode="json"),
                               "forecast": fc.model_dump(mode="json")}))
"""
PROBE = f"""
import importlib, importlib.metadata, importlib.resources, json, triserve_client

def importable(name):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True

try:  # the [grpc] extra is not installed here
    import triserve_client.grpc
    grpc_client = "imported"
except ImportError as exc:
    grpc_client = str(exc)

print(json.dumps({{"file": triserve_client.__file__, "exports": sorted(triserve_client.__all__),
                  "dists": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
                  "importable": [m for m in {SERVER_PACKAGES!r} if importable(m)], "grpc_client": grpc_client,
                  "stubs": sorted(p.name for p in importlib.resources.files("triserve_client._proto").iterdir()
                                  if p.name.startswith("triserve_pb2"))}}))
"""


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Python client\n"):]
    section = section[:section.index("\n### ", 1)]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "README '### Python client' has no python block"
    return block.group(1)


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """In `cwd` (not the checkout: nothing of the server on sys.path), without the caller's PYTHONPATH or venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd[:4]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.timeout(900)  # the session server's first start (building the tiny models) may count here too
def test_client_installs_alone_and_runs_the_readme_example(server, tmp_path):
    # a copy of client/: setuptools builds in the source tree, and a stale build/ there could leak into the wheel
    src = shutil.copytree(ROOT / "client", tmp_path / "client",
                          ignore=shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__"))
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", str(src)], tmp_path, 300)

    probe = json.loads(run([python, "-c", PROBE], tmp_path, 60).stdout)
    assert probe["file"].startswith(str(venv)), probe["file"]  # the installed wheel, not the checkout
    assert probe["importable"] == [], f"server packages importable in the client's venv: {probe['importable']}"
    assert {"triserve-client", "httpx", "pydantic", "tenacity"} <= set(probe["dists"])
    assert not {"triserve", "bentoml", "fastapi", "numpy", "onnxruntime"} & set(probe["dists"]), probe["dists"]
    assert {"TriserveClient", "AsyncTriserveClient", "TriserveAPIError", "ForecastResponse"} <= set(probe["exports"])
    # gRPC is the [grpc] extra: without it the package imports, its grpc module says what to install; the stubs ship
    assert not {"grpcio", "protobuf"} & set(probe["dists"]), probe["dists"]
    assert "pip install 'triserve-client[grpc]'" in probe["grpc_client"], probe["grpc_client"]
    assert probe["stubs"] == ["triserve_pb2.py", "triserve_pb2.pyi", "triserve_pb2_grpc.py"], probe["stubs"]

    image = tmp_path / "shapes.png"
    image.write_bytes(png_bytes(seed=3))
    example, n = re.subn(r"^URL, IMAGE = .*$", f"URL, IMAGE = {server.url!r}, pathlib.Path({str(image)!r})",
                         readme_example(), flags=re.M)
    assert n == 1, "README example: expected one `URL, IMAGE = ...` line"
    (tmp_path / "example.py").write_text(example + REPORT)
    out, report_line = run([python, "example.py"], tmp_path, 120).stdout.split("REPORT ", 1)
    print(out)  # what the README example prints
    report = json.loads(report_line)

    classify = report["classify"]
    assert classify["request_id"] == "demo-1" and classify["deployment"] == "text"
    short, long = classify["results"]
    assert not short["truncated"] and long["truncated"] and long["chars"] == len("book a flight to paris ") * 5000
    assert len(short["top_k"]) == 2 and classify["timings"]["total_ms"] > 0

    image_result = report["detect"]["results"][0]
    assert (image_result["width"], image_result["height"]) == (320, 240)
    assert report["detect"]["deployment"] == "detection"
    assert all(d["score"] >= 0.3 and len(d["box"]) == 4 for d in image_result["detections"])

    forecast = report["forecast"]
    assert len(forecast["forecast"]) == 12 and forecast["forecast"][0]["timestamp"].startswith("2000-01-01")
    assert forecast["input"]["frequency"] == "MS" and forecast["input"]["method"]
    assert "('detection', 'detection'," in out and "422 validation_error" in out  # models() and the typed error
