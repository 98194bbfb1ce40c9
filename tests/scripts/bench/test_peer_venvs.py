"""The KServe and MLServer peers inside their own venvs (.cache/peers/<system>, recipes in the peer modules): each
peer's handler, called without a server, must answer what the naive peer's pipeline answers in this venv on the same
model (top-3 labels for text, boxes for detection) and refuse a malformed body. Skipped when a venv or the model
store is absent (neither is part of the checkout)."""
from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from scripts.bench.harness import PEER_VENVS, ROOT

TEXTS = ["play some jazz", "what is the weather in paris tomorrow", "book a table for two"]


def _venv(system: str):
    py = PEER_VENVS / system / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no {system} venv at {py} (recipe in scripts/bench/peers/{system}_text.py)")
    return py


def _model(name: str):
    from scripts.bench.textmix import model_dir

    try:
        return model_dir(name=name)
    except FileNotFoundError:
        pytest.skip(f"{name} is not in models/store (make models)")


def _run(py, code: str, data: object = None) -> dict:
    """`code` in the venv's interpreter with the checkout on PYTHONPATH and `data` as DATA (JSON on stdin: images
    are too long for a command line); its last stdout line as JSON."""
    code = "import json, sys\nDATA = json.load(sys.stdin)\n" + textwrap.dedent(code)
    p = subprocess.run([str(py), "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       input=json.dumps(data), env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _expected_text(d, manifest) -> list[dict]:
    from scripts.bench.peers.common import session
    from scripts.bench.peers.pipelines import TextClassifier

    return [r.as_dict() for r in TextClassifier(d, manifest, session(d, manifest, 1), 3)(TEXTS)]


def _photos(n: int = 3) -> list[str]:
    from scripts.bench import compare_detect as cd

    photos = cd.photo_files(ROOT / ".cache/importer/photos")
    return [im["b64"] for im in (cd.photo_mix(photos, n) if photos else cd.image_mix(n))]


def _expected_boxes(manifest, d, b64s) -> list[list]:
    from scripts.bench.peers.common import session
    from scripts.bench.peers.pipelines import Detector

    return [[[c, b, s] for c, b, s in im] for im in Detector(manifest, session(d, manifest, 1))(b64s)]


def test_kserve_text_predict_matches_the_naive_pipeline():
    py = _venv("kserve")
    d, manifest = _model("minilm-intent")
    got = _run(py, f"""
        import json
        from pathlib import Path
        from kserve.errors import InvalidInput
        from scripts.bench.peers.kserve_text import IntentModel
        m = IntentModel(Path({str(d)!r}), 1)
        try:
            m.predict({{"instances": [3]}})
            bad = "accepted"
        except InvalidInput as exc:
            bad = str(exc)
        print(json.dumps({{"ok": m.predict({{"instances": {TEXTS!r}}}), "bad": bad}}))
    """)
    assert got["ok"]["predictions"] == _expected_text(d, manifest)
    assert "instances" in got["bad"]


def test_kserve_detect_predict_matches_the_naive_pipeline():
    py = _venv("kserve")
    d, manifest = _model("yolov8n-coco")
    b64s = _photos()
    got = _run(py, f"""
        import json
        from pathlib import Path
        from kserve.errors import InvalidInput
        from scripts.bench.peers.kserve_detect import DetectorModel
        m = DetectorModel(Path({str(d)!r}), 1)
        out = m.predict({{"instances": [{{"image_bytes": {{"b64": s}}}} for s in DATA]}})
        bad = []
        not_an_image = {{"instances": [{{"image_bytes": {{"b64": "bm90IGFuIGltYWdl"}}}}]}}
        for body in ({{"instances": [{{"image": "x"}}]}}, not_an_image):
            try:
                m.predict(body)
                bad.append("accepted")
            except InvalidInput as exc:
                bad.append(str(exc))
        print(json.dumps({{"ok": out, "bad": bad}}))
    """, b64s)
    boxes = [[[x["class_id"], x["box"], x["score"]] for x in p["detections"]] for p in got["ok"]["predictions"]]
    assert boxes == _expected_boxes(manifest, d, b64s)
    assert "image_bytes" in got["bad"][0] and "accepted" not in got["bad"]


def _mlserver_call(runtime: str, d, name: str, shape: list[int]) -> str:
    """A snippet that loads the runtime as MLServer would and predicts DATA as one BYTES input of `shape`, then a
    malformed (INT32) request."""
    return f"""
        import asyncio, json
        from mlserver.errors import InferenceError
        from mlserver.settings import ModelParameters, ModelSettings
        from mlserver.types import InferenceRequest, RequestInput
        from scripts.bench.peers.{runtime.rsplit('.', 1)[0]} import {runtime.rsplit('.', 1)[1]} as Runtime
        rt = Runtime(ModelSettings(name={name!r}, implementation=Runtime,
                                   parameters=ModelParameters(uri={str(d)!r}, extra={{"intra_op": 1}})))
        async def main():
            await rt.load()
            ok = await rt.predict(InferenceRequest(inputs=[RequestInput(name="x", shape={shape!r}, datatype="BYTES",
                                                                        data=DATA)]))
            try:
                await rt.predict(InferenceRequest(inputs=[RequestInput(name="x", shape=[1, 1], datatype="INT32",
                                                                       data=[3])]))
                bad = "accepted"
            except InferenceError as exc:
                bad = str(exc)
            return {{"ok": {{o.name: {{"shape": o.shape, "data": o.data.root if hasattr(o.data, "root") else o.data}}
                            for o in ok.outputs}}, "bad": bad}}
        print(json.dumps(asyncio.run(main()), default=str))
    """


def test_mlserver_text_runtime_matches_the_naive_pipeline():
    py = _venv("mlserver")
    d, manifest = _model("minilm-intent")
    got = _run(py, _mlserver_call("mlserver_text.IntentRuntime", d, "intent", [len(TEXTS), 1]), TEXTS)
    want = _expected_text(d, manifest)
    assert got["ok"]["labels"]["shape"] == [len(TEXTS), 3]
    assert got["ok"]["labels"]["data"] == [t["label"] for w in want for t in w["top_k"]]
    assert got["ok"]["scores"]["data"] == pytest.approx([t["score"] for w in want for t in w["top_k"]], abs=1e-6)
    assert "BYTES" in got["bad"]


def test_mlserver_detect_runtime_matches_the_naive_pipeline():
    from scripts.bench import compare_detect as cd

    py = _venv("mlserver")
    d, manifest = _model("yolov8n-coco")
    b64s = _photos()
    got = _run(py, _mlserver_call("mlserver_detect.DetectorRuntime", d, "detector", [len(b64s), 1]), b64s)
    want = _expected_boxes(manifest, d, b64s)
    counts = got["ok"]["count"]["data"]
    assert counts == [len(w) for w in want]
    k = got["ok"]["boxes"]["shape"][1]
    for i, w in enumerate(want):  # each image's rows, as a V2 answer of its own (what MLServer's batcher splits out)
        one = {"outputs": [{"name": "count", "data": [counts[i]]},
                           {"name": "boxes", "data": got["ok"]["boxes"]["data"][i * k * 4:(i + 1) * k * 4]},
                           {"name": "scores", "data": got["ok"]["scores"]["data"][i * k:(i + 1) * k]},
                           {"name": "classes", "data": got["ok"]["classes"]["data"][i * k:(i + 1) * k]}]}
        m = cd.match_detections([tuple(x) for x in w], cd.parse_detections("mlserver", one), tol_px=0.01)
        assert m["agree"], m
    assert "BYTES" in got["bad"]
