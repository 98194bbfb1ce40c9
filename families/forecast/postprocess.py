"""Scaled model output -> forecast with intervals, and the output sanity check."""
from __future__ import annotations

import numpy as np

from services.common.errors import InvalidOutput

MAX_SCALED_MAGNITUDE = 1e3  # a window-scaled forecast this far from the window mean is garbage, not a forecast


def check_forecast(scaled: np.ndarray, horizon: int) -> None:
    if scaled.shape != (horizon,):
        raise InvalidOutput(f"forecast of shape {scaled.shape}, expected ({horizon},)")
    if not np.isfinite(scaled).all():
        raise InvalidOutput("non-finite forecast")
    if np.abs(scaled).max(initial=0.0) > MAX_SCALED_MAGNITUDE:
        raise InvalidOutput("forecast out of range")


def with_intervals(mean: np.ndarray, quantiles: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """Add validation-residual quantiles (per horizon step) to the point forecast: 50% and 90% bands."""
    h = len(mean)
    q = {k: np.asarray(v, dtype=np.float64)[:h] for k, v in quantiles.items()}
    zeros = np.zeros(h)
    return {"lower_50": mean + q.get("0.25", zeros), "upper_50": mean + q.get("0.75", zeros),
            "lower_90": mean + q.get("0.05", zeros), "upper_90": mean + q.get("0.95", zeros)}
