"""Static categoricals of a panel (a store's type, a product's family): series that share a category pool their
methods' backtest scores, used only where the panel's own backtest says pooling helps.

Why: each series picks its methods from three close backtest origins, which is a noisy choice on a short or noisy
series; its siblings in the same category usually behave alike (all stores of type A are weekly-seasonal, all
products of one family trend together), so their scores are evidence too. Each series' score of a method becomes
(1 - POOL) x its own + POOL x the mean of its category's other series (scores are scaled like MASE, so they are
comparable across series); intermittent demand and series without a backtest keep their own.

Whether a categorical is used is decided on the panel itself, out of sample: the weights are chosen from all but the
last backtest origin, once with the own scores and once with the pooled ones, and both combinations are scored on the
last origin (mean scaled absolute error over the series with two origins or more). A categorical is used when pooling
by it lowers that error; of several, the one that lowers it most. Every categorical is reported with both errors.
numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOL = 0.5  # weight of the category's mean score in a series' pooled score


@dataclass(frozen=True)
class Categorical:
    """What one static categorical did for the panel (the same for every series)."""

    name: str
    groups: int  # distinct values over the panel
    used: bool
    error_own: float | None  # mean scaled error on the last backtest origin, weights from the earlier ones
    error_pooled: float | None  # the same with pooled scores (None: no series with two origins)


def pooled(scores: list[dict[str, float] | None], groups: list[str | None]) -> list[dict[str, float] | None]:
    """Each series' scores blended with the mean of its group's other series (None: kept as is: no scores, no
    group, or alone in its group)."""
    members: dict[str, list[int]] = {}
    for i, (s, g) in enumerate(zip(scores, groups)):
        if s is not None and g is not None:
            members.setdefault(g, []).append(i)
    out: list[dict[str, float] | None] = []
    for i, (own, g) in enumerate(zip(scores, groups)):
        others = [scores[j] for j in members.get(g, []) if j != i] if g is not None else []
        if own is None or not others:
            out.append(None)
            continue
        blend = {}
        for name, v in own.items():
            seen = [o[name] for o in others if o is not None and name in o]
            blend[name] = (1 - POOL) * v + POOL * float(np.mean(seen)) if seen else v
        out.append(blend)
    return out


def choose(by_origin: list[dict[str, np.ndarray] | None], errors: list[dict[str, np.ndarray] | None],
           scales: list[float], statics: list[dict[str, str]], weights_of) -> tuple[str | None, list[Categorical]]:
    """(the categorical to pool by or None, what each did): module docstring. by_origin[i]: method -> scaled score per
    origin (None: not pooled); errors[i]: method -> raw errors [origins, steps]; weights_of: scores -> weights."""
    names = sorted({k for s in statics for k in s})
    usable = [i for i, b in enumerate(by_origin) if b is not None and len(next(iter(b.values()))) >= 2]
    early = [{k: float(np.mean(v[:-1])) for k, v in by_origin[i].items()} if i in usable else None  # type: ignore
             for i in range(len(by_origin))]

    def last_error(i: int, w: dict[str, float]) -> float:
        e = errors[i]
        assert e is not None
        return float(np.mean(np.abs(np.sum([v * e[k][-1] for k, v in w.items()], axis=0)))) / scales[i]

    own = float(np.mean([last_error(i, weights_of(early[i])) for i in usable])) if usable else None
    report, best, best_error = [], None, own
    for name in names:
        groups = [s.get(name) for s in statics]
        blended = pooled(early, groups)
        error = (float(np.mean([last_error(i, weights_of(blended[i] if blended[i] is not None else early[i]))
                                for i in usable])) if usable else None)
        used = error is not None and own is not None and any(b is not None for b in blended) and error < own
        report.append(Categorical(name, len({g for g in groups if g is not None}), used, own, error))
        if used and best_error is not None and error is not None and error < best_error:
            best, best_error = name, error
    report = [Categorical(c.name, c.groups, c.name == best, c.error_own, c.error_pooled) for c in report]
    return best, report
