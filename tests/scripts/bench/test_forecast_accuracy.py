"""scripts/bench/forecast_accuracy.py: statsforecast results are cached only when they are results (a run where every
series failed, statsforecast missing, is reported but run again next time)."""
from __future__ import annotations

from pathlib import Path

import pytest

from scripts.bench import forecast_accuracy as fa


def test_a_run_where_every_series_failed_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fa, "CACHE_DIR", tmp_path)
    tasks = {"AutoETS": [("a", [1.0, 2.0, 3.0], 2, {}), ("b", [1.0, 2.0], 2, {})],
             "AutoTheta": [("a", [1.0, 2.0, 3.0], 2, {})]}
    runs: list[set[str]] = []

    def fake_run(todo, budget_s, sf_path, timeout_s):
        runs.append(set(todo))
        return {"AutoETS": {"preds": {"a": None, "b": None}, "times": {}, "errors": 2, "seconds": 0.0},
                "AutoTheta": {"preds": {"a": [1.0]}, "times": {}, "errors": 0, "seconds": 0.0}}

    monkeypatch.setattr(fa, "run_statsforecast", fake_run)
    first = fa.statsforecast_cached("heldout", "fp", tasks, 10.0, tmp_path, no_cache=False)
    assert first["AutoETS"]["errors"] == 2 and first["AutoTheta"]["errors"] == 0  # reported either way
    fa.statsforecast_cached("heldout", "fp", tasks, 10.0, tmp_path, no_cache=False)
    assert runs == [{"AutoETS", "AutoTheta"}, {"AutoETS"}]  # the failed method runs again; the good one is cached
