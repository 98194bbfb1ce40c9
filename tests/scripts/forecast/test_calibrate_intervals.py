"""scripts/forecast/calibrate_intervals.py: the conformal fit, the table rewrite, and that only training series are
forecast (no held-out series reaches the calibration)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scripts.forecast import calibrate_intervals as ci
from triserve.families.forecast import intervals
from triserve.families.forecast.features import QUANTILES

SHAPE = np.array([-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0])  # quantile offsets: 90 % half-width 3, 50 % half-width 1


def test_scores_are_the_widening_that_just_covers_each_point():
    q = SHAPE[None, :] + 10
    assert ci.scores(q, np.array([13.0]), 0.9).tolist() == [1.0]
    assert ci.scores(q, np.array([8.5]), 0.5).tolist() == [1.5]
    assert ci.scores(q, np.array([10.0]), 0.8).tolist() == [0.0]


def test_fit_gives_each_frequency_its_quantile_and_leaves_small_ones_to_the_global_table():
    rng = np.random.default_rng(0)
    n_big, n_small = 200, intervals.MIN_WINDOWS - 1
    freqs = ["W"] * n_big + ["min"] * n_small
    spread = {"W": 0.5, "min": 3.0}  # W's errors are half the model's spread: its factors come out below 1
    forecasts = [np.zeros((4, len(QUANTILES))) + SHAPE[None, :] for _ in freqs]
    targets = [rng.normal(0, spread[f] * 3 / 1.645, 4) for f in freqs]
    fitted = ci.fit(forecasts, targets, freqs)
    assert set(fitted["by_frequency"]) == {"W"} and fitted["windows"] == {"W": n_big, "min": n_small}
    assert 0.35 < fitted["by_frequency"]["W"][0.9] < 0.7
    assert fitted["pooled"][0.9] > fitted["by_frequency"]["W"][0.9]


def test_write_tables_rewrites_the_module_it_is_read_from(tmp_path: Path):
    path = tmp_path / "intervals.py"
    path.write_text(Path(intervals.__file__).read_text())
    fitted = {"by_frequency": {"W": {0.5: 0.9, 0.8: 0.95, 0.9: 1.0}}, "windows": {"W": 58, "min": 3}}
    ci.write_tables(fitted, path)
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    assert ns["BY_FREQUENCY"] == fitted["by_frequency"] and ns["WINDOWS"] == fitted["windows"]
    ci.write_tables({"by_frequency": {"h": {0.5: 1.0, 0.8: 1.0, 0.9: 1.0}}, "windows": {"h": 40}}, path)
    ns = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    assert ns["BY_FREQUENCY"] == {"h": {0.5: 1.0, 0.8: 1.0, 0.9: 1.0}}


def test_only_training_series_are_forecast(monkeypatch: pytest.MonkeyPatch):
    """The calibration set is split.train: no held-out series' history is handed to the served path."""
    import scripts.bench.forecast_accuracy as bench
    import scripts.common
    import scripts.forecast.corpus as corpus
    from triserve.models.registry import LocalRegistry

    data = corpus.synthetic_corpus(0, per_frequency=6)
    split = corpus.split_corpus(data)
    assert split.heldout and split.train
    monkeypatch.setattr(corpus, "build_corpus", lambda: data)
    monkeypatch.setattr(LocalRegistry, "load_verified",
                        lambda self, name, ref: (Path("."), type("M", (), {"model_file": "x", "version": "t"})()))
    monkeypatch.setattr(scripts.common, "ort_session", lambda *a, **k: None)
    seen: list[np.ndarray] = []

    def fake_served(session, items, many=False):
        seen.extend(it[0] for it in items)
        assert intervals.GLOBAL == {lv: 1.0 for lv in intervals.LEVELS}  # fitted unwidened
        return [type("F", (), {"quantiles": np.zeros((it[2], len(QUANTILES))) + SHAPE})() for it in items], []

    monkeypatch.setattr(bench, "run_served", fake_served)
    ci.main([])
    held = {s.values[: len(s.values) - len(t)].tobytes()
            for s in split.heldout for t in [corpus.last_window(s)[1]]}
    assert len(seen) == len(split.train) and not any(h.tobytes() in held for h in seen)
    assert intervals.GLOBAL == {0.5: 1.1, 0.8: 1.17, 0.9: 1.26}  # restored
