"""A model's scaled output -> quantile forecasts in the series' units, and the output sanity check."""
from __future__ import annotations

import numpy as np

from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.kernel.errors import InvalidOutput

# A scaled forecast this many scale units (mean absolute deviations of the history) from the history's mean is
# garbage, not a forecast: the global model's inputs are clipped at 50.
MAX_SCALED_MAGNITUDE = 1e4
BANDS = {"lower_50": 0.25, "upper_50": 0.75, "lower_90": 0.05, "upper_90": 0.95}


def output_shape(pre: ForecastPreprocess) -> tuple[int, ...]:
    return (pre.horizon, len(pre.quantiles)) if pre.quantiles else (pre.horizon,)


def check_forecast(out: np.ndarray, pre: ForecastPreprocess) -> None:
    if out.shape != output_shape(pre):
        raise InvalidOutput(f"forecast of shape {out.shape}, expected {output_shape(pre)}")
    if not np.isfinite(out).all():
        raise InvalidOutput("non-finite forecast")
    if pre.scaling != "none" and np.abs(out).max(initial=0.0) > MAX_SCALED_MAGNITUDE:
        raise InvalidOutput("forecast out of range")


def quantile_forecast(out: np.ndarray, pre: ForecastPreprocess, loc: float, scale: float,
                      horizon: int) -> tuple[list[float], np.ndarray]:
    """(levels, [horizon, len(levels)] float64 in original units). A point model gives the single level 0.5.
    Quantiles are sorted per step: a crossing (q95 below q90) is a model artefact no client should see."""
    q = np.asarray(out, dtype=np.float64)[:horizon] * scale + loc
    if q.ndim == 1:
        return [0.5], q[:, None]
    return list(pre.quantiles), np.sort(q, axis=1)


def bands(levels: list[float], q: np.ndarray) -> dict[str, np.ndarray | None]:
    """The 50 % and 90 % interval bounds where the model outputs those quantiles."""
    return {name: q[:, levels.index(level)] if level in levels else None for name, level in BANDS.items()}
