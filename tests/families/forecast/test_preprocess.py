"""Model items of both forecast contracts and how the runner unpacks them (families/forecast/preprocess.py,
runtime.py, postprocess.py)."""
from types import SimpleNamespace

import numpy as np
import pytest

from scripts.forecast.build import primary_contract
from triserve.families.forecast import runtime
from triserve.families.forecast.features import CONTEXT, FREQ_INDEX, MAX_HORIZON, N_FEATURES, QUANTILES, prepare_batch
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.postprocess import bands, quantile_forecast
from triserve.families.forecast.preprocess import model_item

T0 = np.datetime64("2026-01-01T00:00:00", "s")


def window_contract(**kw) -> ForecastPreprocess:
    args = dict(contract="window", context=24, horizon=12, frequencies=["h"], max_horizon={"h": 12},
                quantiles=[], scaling="none", min_history=24)
    return ForecastPreprocess(**(args | kw))


def test_global_item_matches_prepare_batch_and_unpacks_to_the_graph_inputs():
    pre = primary_contract()
    history = 50_000 + 800 * np.sin(np.arange(300) * 2 * np.pi / 24)
    item = model_item(pre, history, "h", T0)
    want = prepare_batch([history], ["h"], [T0])
    manifest = SimpleNamespace(preprocess=pre)
    feeds = runtime.feeds(manifest, ["context", "mask", "freq", "features"], [item.x, item.x])
    assert set(feeds) == {"context", "mask", "freq", "features"}
    for name in feeds:
        np.testing.assert_array_equal(feeds[name][0], want.feeds[name][0])
    assert feeds["freq"].dtype == np.int64 and feeds["freq"][0] == FREQ_INDEX["h"]
    assert feeds["features"].shape == (2, N_FEATURES)
    assert item.loc == want.loc[0] and item.scale == want.scale[0]
    assert item.used == 300 and item.padded == CONTEXT - 300


@pytest.mark.parametrize("level", [1e-6, 1.0, 1e12])
def test_scale_free_items(level):
    """The same shape at any level gives the same scaled context (float64 items keep 1e12 + small exact)."""
    pre = primary_contract()
    base = np.arange(40.0) % 7
    a, b = model_item(pre, base, "D", T0), model_item(pre, level + base * level * 1e-3, "D", T0)
    np.testing.assert_allclose(a.x[:CONTEXT], b.x[:CONTEXT], atol=1e-5)


def test_constant_series_scaled_to_zeros_and_back_to_the_constant():
    pre = primary_contract()
    item = model_item(pre, np.full(10, 42.0), "MS", T0)
    assert not item.x[:CONTEXT].any() and item.scale > 0
    out = np.zeros((pre.horizon, len(QUANTILES)), dtype=np.float32)
    levels, q = quantile_forecast(out, pre, item.loc, item.scale, 5)
    assert levels == list(QUANTILES) and np.allclose(q, 42.0)


def test_yearly_reads_only_its_context():
    item = model_item(primary_contract(), np.arange(100.0), "YS", T0)
    assert item.used == 30 and item.padded == CONTEXT - 30


def test_window_contract_items_and_point_output():
    pre = window_contract(scaling="mean_abs")
    history = np.arange(100.0)
    item = model_item(pre, history, "h", T0)
    assert item.x.shape == (24,) and item.used == 24
    np.testing.assert_allclose(item.x * item.scale + item.loc, history[-24:])
    feeds = runtime.feeds(SimpleNamespace(preprocess=pre), ["series"], [item.x])
    assert feeds["series"].shape == (1, 24) and feeds["series"].dtype == np.float32
    levels, q = quantile_forecast(np.ones(12, np.float32), pre, item.loc, item.scale, 3)
    assert levels == [0.5] and q.shape == (3, 1) and np.allclose(q[:, 0], item.loc + item.scale)
    assert bands(levels, q) == {"lower_50": None, "upper_50": None, "lower_90": None, "upper_90": None}


def test_crossing_quantiles_are_sorted():
    pre = primary_contract()
    out = np.tile(np.array(QUANTILES[::-1], np.float32), (pre.horizon, 1))
    _, q = quantile_forecast(out, pre, 0.0, 1.0, 2)
    assert (np.diff(q, axis=1) >= 0).all()


@pytest.mark.parametrize("kw,message", [
    ({"frequencies": ["2h"]}, "unsupported frequencies"),
    ({"max_horizon": {}}, "max_horizon lacks"),
    ({"max_horizon": {"h": 13}}, "1..horizon"),
    ({"quantiles": [0.1, 0.9]}, "median"),
    ({"min_history": 3}, "min_history"),
])
def test_contract_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        window_contract(**kw)


def test_global_contract_is_always_mean_abs_scaled():
    with pytest.raises(ValueError, match="mean_abs"):
        ForecastPreprocess.model_validate({**primary_contract().model_dump(), "scaling": "none"})


def test_theta_session_answers_in_scaled_units_like_the_method_in_original_units():
    from triserve.families.forecast.theta import fallback_forecast

    pre = primary_contract()
    session = runtime.ThetaSession(SimpleNamespace(preprocess=pre))
    rng = np.random.default_rng(0)
    history = 1e9 * (5 + np.sin(np.arange(120) * 2 * np.pi / 12) + 0.1 * rng.standard_normal(120))
    item = model_item(pre, history, "MS", T0, raw_history=True)
    feeds = runtime.feeds(SimpleNamespace(preprocess=pre), ["context", "mask", "freq", "features", "scaling",
                                                            "history"], [item.x, np.zeros_like(item.x)])
    out = session.run(["quantiles"], feeds)[0]
    assert out.shape == (2, pre.horizon, len(QUANTILES)) and not out[1].any()  # an all-masked row: zeros
    _, q = quantile_forecast(out[0], pre, item.loc, item.scale, MAX_HORIZON["MS"])
    want = fallback_forecast(history[-144:], "MS", MAX_HORIZON["MS"])
    np.testing.assert_allclose(q, want, rtol=1e-7)  # float32 output in scaled units
