"""The forecast builder end to end on the tiny recipe (synthetic corpus): manifests, contract, parity, gates, the
numpy fallback artifact, caching."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")

from scripts.common import ort_session
from scripts.forecast import build as fb
from scripts.pipeline import build_task
from triserve import families
from triserve.families.forecast.features import FREQUENCIES, H_MAX, MAX_HORIZON, QUANTILES
from triserve.families.forecast.preprocess import model_item
from triserve.models.registry import LocalRegistry

PRIMARY, FALLBACK = fb.ARTIFACTS


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("forecast")
    registry = LocalRegistry(root / "registry")
    row = build_task("forecast", "tiny", registry, root / "cache")
    return registry, row, root


def _load(registry, name):
    version = registry.resolve(name, "stable")
    return registry.manifest(name, version), registry.path(name, version)


def test_built_promoted_and_cached(built):
    registry, row, root = built
    assert row["status"] == "built"
    again = build_task("forecast", "tiny", registry, root / "cache")
    assert again["status"] == "cached" and again["version"] == row["version"]


def test_primary_manifest_states_the_contract(built):
    m, path = _load(built[0], PRIMARY)
    pre = m.preprocess
    assert m.engine == "onnxruntime" and m.variant == "primary" and (path / m.model_file).is_file()
    assert pre.contract == "global" and pre.frequencies == list(FREQUENCIES) and pre.quantiles == list(QUANTILES)
    assert pre.max_horizon == MAX_HORIZON and pre.horizon == H_MAX and pre.min_history == 3
    assert [i.name for i in m.inputs] == ["context", "mask", "freq", "features"]
    assert m.outputs[0].shape == ["batch", H_MAX, len(QUANTILES)]
    assert m.parity and all(c.passed for c in m.parity) and m.gates["parity"]
    assert {"mase_ratio", "coverage90", "ms_per_series"} <= set(m.metrics)
    assert m.data_fingerprint and m.source.recipe["corpus"] == "synthetic"
    assert m.source.license == "Apache-2.0"  # trained here: the project's licence
    assert "relative_spread" in m.reference


def test_fallback_is_the_numpy_theta_method(built):
    m, path = _load(built[0], FALLBACK)
    assert m.engine == "numpy" and m.fallback_for == PRIMARY and m.variant == "fallback"
    assert json.loads((path / m.model_file).read_text())["method"] == "theta"
    assert [i.name for i in m.inputs][-2:] == ["scaling", "history"]
    assert m.preprocess == _load(built[0], PRIMARY)[0].preprocess
    assert m.parity and all(c.passed for c in m.parity)


def test_served_path_answers_every_frequency_at_any_scale(built):
    m, path = _load(built[0], PRIMARY)
    session = ort_session(path / m.model_file, threads=1)
    rng = np.random.default_rng(1)
    for f in FREQUENCIES:
        for level in (1e-6, 1e12):
            history = level * (3 + rng.standard_normal(50))
            item = model_item(m.preprocess, history, f, np.datetime64("2026-01-01", "s"))
            feeds = families.runtime("forecast").feeds(m, [i.name for i in m.inputs], [item.x])
            out = session.run(None, feeds)[0][0]
            assert out.shape == (H_MAX, len(QUANTILES)) and np.isfinite(out).all()
            median = out[: MAX_HORIZON[f], QUANTILES.index(0.5)] * item.scale + item.loc
            assert np.abs(median / level - 3).max() < 20  # in the series' own units


def test_tampered_fallback_method_is_refused(built, tmp_path):
    m, _ = _load(built[0], FALLBACK)
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"method": "prophet"}))
    with pytest.raises(ValueError, match="unknown forecast method"):
        families.runtime("forecast").numpy_session(m, bad)
