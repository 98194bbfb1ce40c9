"""Static categoricals of a panel (families/forecast/pooling.py): scores pooled within a category, used only where
the panel's own last backtest origin says pooling helps."""
from __future__ import annotations

import numpy as np
import pytest

from triserve.families.forecast import pooling
from triserve.families.forecast.ensemble import combine_many, weights_of


def test_pooled_scores_blend_with_the_category_mean():
    scores = [{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 2.0}, {"a": 5.0}, None]
    out = pooling.pooled(scores, ["x", "x", "y", "x"])
    assert out[0] == pytest.approx({"a": 2.0, "b": 2.0}) and out[1] == pytest.approx({"a": 2.0, "b": 2.0})
    assert out[2] is None and out[3] is None  # alone in its category; no scores


def test_a_categorical_is_used_only_where_it_lowers_the_last_origins_error():
    # two methods, three origins; series 0's early origins favour 'a', which misses its last origin; its sibling
    # says 'b' clearly: pooled by 'kind', series 0 picks 'b' and the last origin's error drops
    steps = 2
    by_origin = [{"a": np.array([0.5, 0.5, 2.0]), "b": np.array([0.6, 0.6, 0.0])},
                 {"a": np.array([2.0, 2.0, 2.0]), "b": np.array([0.1, 0.1, 0.0])}]
    errors = [{k: np.repeat(v[:, None], steps, axis=1) for k, v in b.items()} for b in by_origin]
    statics = [{"kind": "A", "noise": "p"}, {"kind": "A", "noise": "q"}]
    key, report = pooling.choose(by_origin, errors, [1.0, 1.0], statics, weights_of)
    assert key == "kind"
    kind, noise = sorted(report, key=lambda c: c.name)
    assert kind.used and kind.error_pooled < kind.error_own and kind.groups == 1
    assert not noise.used and noise.error_pooled == pytest.approx(noise.error_own)  # singletons: nothing pooled


def test_combine_many_reports_every_categorical_and_keeps_own_scores_when_pooling_does_not_help():
    rng = np.random.default_rng(3)
    t = np.arange(60)
    ys = [100 + 10 * np.sin(t * 2 * np.pi / 12) + rng.normal(0, 2, 60) for _ in range(4)]
    statics = [{"store_type": "A"}, {"store_type": "A"}, {"store_type": "B"}, {"store_type": "B"}]
    fcs = combine_many(ys, ["MS"] * 4, [12] * 4, None, statics)
    alone = combine_many(ys, ["MS"] * 4, [12] * 4)
    for fc, own in zip(fcs, alone):
        assert fc.static is not None and [c.name for c in fc.static.categoricals] == ["store_type"]
        cat = fc.static.categoricals[0]
        assert cat.groups == 2 and cat.used == (cat.error_pooled < cat.error_own)
        if not cat.used:  # not used: the answer is exactly the series' own
            assert not fc.static.used and np.allclose(fc.quantiles, own.quantiles)
        else:
            assert fc.static.used and fc.static.pooled_by == "store_type" and fc.static.group_size == 2
