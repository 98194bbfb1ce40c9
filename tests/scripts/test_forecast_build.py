"""The forecast builder end to end on the tiny recipe: manifests, dynamic batch, parity, the fallback formula, caching."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("statsmodels")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from models.manifest import ForecastPreprocess, Manifest  # noqa: E402
from models.registry import LocalRegistry  # noqa: E402
from scripts.common import GateFailed, ort_session, parity_gate  # noqa: E402
from scripts.forecast import build as fb  # noqa: E402
from scripts.forecast.seasonal_naive import make_seasonal_naive_onnx, seasonal_naive_reference  # noqa: E402
from scripts.pipeline import build_task  # noqa: E402
from families.forecast.preprocess import last_window, scale_windows, unscale  # noqa: E402

PRIMARY, FALLBACK = fb.ARTIFACTS
RECIPE = fb.RECIPES["tiny"]
C, H, M = RECIPE["context"], RECIPE["horizon"], RECIPE["season_length"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("forecast")
    registry = LocalRegistry(root / "registry")
    row = build_task("forecast", "tiny", registry, root / "cache")
    return registry, row, root


def _load(registry, name):
    version = registry.resolve(name, "stable")
    return registry.manifest(name, version), registry.path(name, version)


def test_recipes_contract():
    assert fb.ARTIFACTS == ("co2-forecaster", "co2-seasonal-naive")
    assert set(fb.RECIPES) >= {"default", "tiny"}
    for recipe in fb.RECIPES.values():
        assert recipe["version"] == "1.0.0"
        json.dumps(recipe)  # hashable by the pipeline
    assert fb.RECIPES["default"]["strict_quality_gates"] is True
    assert fb.RECIPES["tiny"]["strict_quality_gates"] is False


def test_built_and_promoted(built):
    registry, row, _ = built
    assert row["status"] == "built"
    assert row["version"].startswith("1.0.0-")
    for name in fb.ARTIFACTS:
        assert registry.aliases(name)["stable"] == row["version"]


@pytest.mark.parametrize("name", fb.ARTIFACTS)
def test_manifest_fields(built, name):
    registry, row, _ = built
    m, path = _load(registry, name)
    assert Manifest.model_validate_json(m.dumps()) == m  # round-trips through the schema
    assert m.task == "forecast" and m.version == row["version"] and m.opset == 17
    assert m.model_file == "model.onnx" and [f.path for f in m.files] == ["model.onnx"]
    assert [(t.name, t.dtype, t.shape) for t in m.inputs] == [("window", "float32", ["batch", C])]
    assert [(t.name, t.dtype, t.shape) for t in m.outputs] == [("forecast", "float32", ["batch", H])]
    p = m.preprocess
    assert isinstance(p, ForecastPreprocess)
    assert (p.context, p.horizon, p.frequency, p.season_length) == (C, H, "MS", M)
    assert p.scale > 0 and 300 < p.train_mean < 400  # ppm CO2
    assert m.source.kind == "package" and "statsmodels" in m.source.packages and "onnx" in m.source.packages
    assert m.source.seed == RECIPE["seed"] and m.source.recipe == RECIPE
    assert len(m.data_fingerprint) == 64
    assert {"mase", "mase_seasonal_naive", "interval_coverage_90", "ms_per_series"} <= set(m.metrics)
    assert all(np.isfinite(v) for v in m.metrics.values())
    assert 0.0 <= m.metrics["interval_coverage_90"] <= 1.0
    assert set(m.reference) == {"level", "spread"}
    for ref in m.reference.values():
        assert len(ref["edges"]) == RECIPE["reference_bins"] + 1
        assert sum(ref["fractions"]) == pytest.approx(1.0)


@pytest.mark.parametrize("name", fb.ARTIFACTS)
def test_interval_quantiles_monotone(built, name):
    registry, _, _ = built
    q = _load(registry, name)[0].preprocess.interval_quantiles
    assert list(q) == ["0.05", "0.25", "0.75", "0.95"]
    table = np.array([q[k] for k in ("0.05", "0.25", "0.75", "0.95")])
    assert table.shape == (4, H)
    assert np.all(np.diff(table, axis=0) >= 0)  # monotone across quantiles at every step
    assert np.all(table[0] < table[-1])


def test_variants_and_gates(built):
    registry, _, _ = built
    primary, _ = _load(registry, PRIMARY)
    fallback, _ = _load(registry, FALLBACK)
    assert primary.variant == "primary" and primary.fallback_for is None
    assert fallback.variant == "fallback" and fallback.fallback_for == PRIMARY
    assert set(primary.gates) == {"parity", "beats_seasonal_naive"} and primary.gates["parity"]
    assert set(fallback.gates) == {"parity", "cheaper"} and fallback.gates["parity"]
    assert primary.gates["beats_seasonal_naive"] == (primary.metrics["mase"] < primary.metrics["mase_seasonal_naive"])
    assert fallback.metrics["mase_increase"] == pytest.approx(fallback.metrics["mase"] - primary.metrics["mase"])
    assert fallback.metrics["mase_seasonal_naive"] == primary.metrics["mase_seasonal_naive"]
    # same preprocessing apart from the intervals, so the service treats both identically
    assert primary.preprocess.model_dump(exclude={"interval_quantiles"}) == \
        fallback.preprocess.model_dump(exclude={"interval_quantiles"})
    assert primary.data_fingerprint == fallback.data_fingerprint


@pytest.mark.parametrize("name", fb.ARTIFACTS)
def test_parity_recorded(built, name):
    registry, _, _ = built
    m, _ = _load(registry, name)
    cases = {c.case for c in m.parity}
    assert {f"batch{b}/{k}" for b in (1, 4, 32) for k in ("real", "random")} <= cases
    assert all(c.passed and c.max_abs_diff <= c.tolerance for c in m.parity)
    tol = RECIPE["parity_tolerance"] if name == PRIMARY else RECIPE["fallback_parity_tolerance"]
    assert all(c.tolerance == tol for c in m.parity)


@pytest.mark.parametrize("name", fb.ARTIFACTS)
def test_dynamic_batch(built, name):
    registry, _, _ = built
    _, path = _load(registry, name)
    sess = ort_session(path / "model.onnx", threads=1)
    assert isinstance(sess.get_inputs()[0].shape[0], str)
    assert sess.get_inputs()[0].shape[1] == C and sess.get_outputs()[0].shape[1] == H
    rng = np.random.default_rng(0)
    for b in (1, 7, 64):
        out = sess.run(["forecast"], {"window": rng.standard_normal((b, C)).astype(np.float32)})[0]
        assert out.shape == (b, H) and out.dtype == np.float32


def test_seasonal_naive_graph_is_the_formula(built):
    registry, _, _ = built
    m, path = _load(registry, FALLBACK)
    sess = ort_session(path / "model.onnx", threads=1)
    window = np.arange(C, dtype=np.float32)[None, :]  # 0 .. 35
    out = sess.run(["forecast"], {"window": window})[0][0]
    # plain seasonal naive: forecast[h] = window[C - M + h % M] = 24 + h for C=36, M=12, H=12
    expected = np.array([C - M + h % M for h in range(H)], dtype=np.float64)
    if RECIPE["fallback_drift"]:
        # a linear ramp rises by M per season: mean seasonal difference = 12, added once per season ahead
        expected = expected + (np.arange(H) // M + 1) * M
    np.testing.assert_allclose(out, expected, atol=1e-5)
    # a pure seasonal pattern is reproduced exactly (no drift to add)
    season = np.tile(np.arange(M, dtype=np.float32) ** 2, C // M)[None, :]
    np.testing.assert_allclose(sess.run(["forecast"], {"window": season})[0][0],
                               (np.arange(H) % M) ** 2, atol=1e-4)


def test_seasonal_naive_plain_graph(tmp_path):
    path = make_seasonal_naive_onnx(tmp_path / "sn.onnx", context=5, horizon=4, season_length=2, drift=False)
    sess = ort_session(path, threads=1)
    window = np.array([[10, 11, 12, 13, 14], [0, 5, 0, 5, 0]], dtype=np.float32)
    # indices context - m + (h mod m) = 3, 4, 3, 4
    expected = np.array([[13, 14, 13, 14], [5, 0, 5, 0]], dtype=np.float32)
    np.testing.assert_array_equal(sess.run(["forecast"], {"window": window})[0], expected)
    np.testing.assert_array_equal(seasonal_naive_reference(window, 4, 2), expected)
    with_drift = make_seasonal_naive_onnx(tmp_path / "snd.onnx", context=5, horizon=4, season_length=2, drift=True)
    # drift = mean(w[2:] - w[:-2]) = 2 for the ramp, 0 for the alternation; steps 1, 1, 2, 2
    np.testing.assert_allclose(ort_session(with_drift, threads=1).run(["forecast"], {"window": window})[0],
                               [[15, 16, 17, 18], [5, 0, 5, 0]], atol=1e-5)


def test_scaled_fallback_is_seasonal_naive_in_original_units(built):
    registry, _, _ = built
    m, path = _load(registry, FALLBACK)
    series, _ = fb.load_monthly_co2()
    raw = last_window(series, C)
    xs, levels = scale_windows(raw, m.preprocess.scale)
    out = ort_session(path / "model.onnx", threads=1).run(["forecast"], {"window": xs})[0]
    np.testing.assert_allclose(unscale(out, levels, m.preprocess.scale),
                               seasonal_naive_reference(raw, H, M, drift=RECIPE["fallback_drift"]), atol=1e-4)


def test_perturbed_onnx_fails_parity(built, tmp_path):
    registry, _, _ = built
    _, path = _load(registry, PRIMARY)
    good = ort_session(path / "model.onnx", threads=1)
    x = np.random.default_rng(1).standard_normal((4, C)).astype(np.float32)
    reference = good.run(["forecast"], {"window": x})[0]
    assert parity_gate([("ok", {"window": x}, reference)], good)[0].passed

    model = onnx.load(str(path / "model.onnx"))
    init = next(t for t in model.graph.initializer if numpy_helper.to_array(t).dtype == np.float32
                and numpy_helper.to_array(t).ndim == 2)
    weights = numpy_helper.to_array(init).copy()
    weights[0, 0] += 0.05
    init.CopyFrom(numpy_helper.from_array(weights, init.name))
    onnx.save(model, str(tmp_path / "perturbed.onnx"))
    bad = ort_session(tmp_path / "perturbed.onnx", threads=1)
    with pytest.raises(GateFailed):
        parity_gate([("perturbed", {"window": x}, reference)], bad, tolerance=1e-4)


def test_windows_with_targets_in_split():
    series = np.arange(30.0)
    x, y, origins = fb.windows_with_targets_in(series, start=20, stop=26, context=4, horizon=3)
    # origins t with t + 1 >= 20 and t + 3 <= 25: t = 19, 20, 21, 22
    np.testing.assert_array_equal(origins, [19, 20, 21, 22])
    np.testing.assert_array_equal(x[0], [16, 17, 18, 19])
    np.testing.assert_array_equal(y[0], [20, 21, 22])
    np.testing.assert_array_equal(y[-1], [23, 24, 25])
    assert y.min() >= 20 and y.max() < 26


def test_quality_gate_strictness_is_part_of_the_recipe(tmp_path):
    from scripts.common import BuildContext

    # an untrained MLP without the seasonal skip forecasts ~ the window mean: far worse than seasonal naive
    bad = {**RECIPE, "epochs": 0, "seasonal_skip": False}

    def ctx(sub):
        c = BuildContext(task="forecast", profile="tiny", recipe_hash="0" * 64, version="1.0.0-test",
                         work_dir=tmp_path / sub, cache_dir=tmp_path / sub / "cache", git_commit="test")
        c.cache_dir.mkdir(parents=True)
        return c

    with pytest.raises(GateFailed, match="beats_seasonal_naive"):
        fb.build(ctx("strict"), {**bad, "strict_quality_gates": True})
    arts = fb.build(ctx("lenient"), {**bad, "strict_quality_gates": False})
    primary = arts[0].manifest
    assert primary.gates == {"parity": True, "beats_seasonal_naive": False}
    assert primary.metrics["mase"] > primary.metrics["mase_seasonal_naive"]


def test_rebuild_is_cached(built):
    registry, row, root = built
    again = build_task("forecast", "tiny", registry, root / "cache")
    assert again["status"] == "cached" and again["version"] == row["version"]
