"""scripts/forecast/fit_trust.py: the coordinate descent finds the trust that the windows reward, small frequencies keep
the default, the table rewrite round-trips, and only training series reach the served path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scripts.forecast import fit_trust as ft
from triserve.families.forecast import trust
from triserve.families.forecast.ensemble import Candidates


def window(truth: float, scores: dict[str, float]) -> tuple[Candidates, np.ndarray, float]:
    """A window whose target is `truth`; 'global' forecasts it exactly, 'naive' 1 below; seasonal naive errs by 2."""
    final = {"global": np.full(4, truth), "naive": np.full(4, truth - 1.0)}
    return Candidates(final, scores, demand=False, non_negative=True), np.full(4, truth), 2.0


def test_a_method_better_than_its_backtest_gains_trust():
    # the model always forecasts the target exactly, yet its backtest scores it 1.5x the naive's: with the default
    # 0.6 the two share the weight; the fit lowers the model's multiplier until it takes (almost) all of it
    windows = [window(10.0 + i, {"global": 1.5, "naive": 1.0}) for i in range(40)]
    table, start, best = ft.fit_frequency(windows)
    assert best < start - ft.MIN_GAIN
    assert table["global"] < trust.DEFAULT["global"]
    assert ft.objective(windows, table) == pytest.approx(best)


def test_no_gain_no_move():
    # both methods equally right: nothing to win, the default stays
    windows = [(Candidates({"global": np.ones(3), "naive": np.ones(3)}, {"global": 1.0, "naive": 1.0}, False, True),
                np.ones(3) + 0.5 * (-1) ** i, 1.0) for i in range(40)]
    table, start, best = ft.fit_frequency(windows)
    assert table == trust.DEFAULT and best == start


def test_point_is_the_served_weighing_clipped_at_zero():
    c = Candidates({"a": np.array([-2.0, 4.0]), "b": np.array([2.0, 4.0])}, {"a": 1.0, "b": 1.0}, False, True)
    assert ft.point(c, {}).tolist() == [0.0, 4.0]
    assert ft.point(c, {"a": 1e-3}).tolist() == pytest.approx([0.0, 4.0])  # a dominates: -2 clipped
    c.non_negative = False
    assert ft.point(c, {"a": 1e-3}).tolist() == pytest.approx([-2.0, 4.0], abs=1e-4)


def test_write_table_rewrites_the_module_it_is_read_from(tmp_path: Path):
    path = tmp_path / "trust.py"
    path.write_text(Path(trust.__file__).read_text())
    long = {f"method_{i}": 0.25 for i in range(12)}  # wrapped under the line length
    fitted = {"by_frequency": {"YS": {"arima": 0.7, "global": 0.5}, "W": {}, "MS": long}, "model": "forecast-global:t"}
    ft.write_table(fitted, path)
    assert max(len(line) for line in path.read_text().splitlines()) <= 120
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    assert ns["BY_FREQUENCY"] == fitted["by_frequency"] and ns["FITTED_FOR"] == "forecast-global:t"
    ft.write_table({"by_frequency": {"h": {"global": 0.4}}, "model": "m2"}, path)
    ns = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    assert ns["BY_FREQUENCY"] == {"h": {"global": 0.4}} and ns["FITTED_FOR"] == "m2"


def test_only_training_series_are_forecast(monkeypatch: pytest.MonkeyPatch):
    """The fitting set is split.train: no held-out series' history is handed to the served path, and the fit sees
    raw backtest scores (the table in force restored after)."""
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

    def fake_inputs(session, items):
        seen.extend(it[0] for it in items)
        assert trust.of("YS") == {} and trust.DEFAULT == {}  # raw scores while fitting
        return list(items), [None] * len(items)

    monkeypatch.setattr(bench, "served_inputs", fake_inputs)
    in_force = trust.BY_FREQUENCY, trust.DEFAULT
    ft.main([])
    held = {s.values[: len(s.values) - len(t)].tobytes()
            for s in split.heldout for t in [corpus.last_window(s)[1]]}
    assert len(seen) == len(split.train) and not any(h.tobytes() in held for h in seen)
    assert (trust.BY_FREQUENCY, trust.DEFAULT) == in_force
