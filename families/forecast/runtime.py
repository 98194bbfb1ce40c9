"""Runner-side hooks of the forecast family (numpy only: the runner tier imports this and nothing else of it)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from triserve.families.forecast.features import FREQUENCIES
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.preprocess import unpack_global
from triserve.families.forecast.theta import fallback_forecast
from triserve.models.manifest import Manifest, preprocess_as

NUMPY_METHODS = ("theta",)


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Items (families/forecast/preprocess.model_item) stacked into the graph's inputs: the global layout unpacked
    into the inputs the graph declares, a window as [n, context] float32."""
    rows = np.stack([np.asarray(x, dtype=np.float64) for x in xs])
    pre = preprocess_as(manifest, ForecastPreprocess)
    if pre.contract == "global":
        unpacked = unpack_global(rows, pre.context)
        return {name: unpacked[name] for name in input_names}
    return {input_names[0]: np.ascontiguousarray(rows, dtype=np.float32)}


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    return {}


class ThetaSession:
    """The numpy Theta fallback (families/forecast/theta.py) behind the interface the runner calls a graph with:
    global-contract feeds in, scaled quantiles [n, horizon, Q] out (the primary's output contract). It reads the raw
    history (float64: exactly the client's values, so its positivity test and SES fit match the method run on the
    series itself) and the scaling (loc, scale) that the service undoes."""

    def __init__(self, manifest: Manifest):
        self.pre = preprocess_as(manifest, ForecastPreprocess)
        self.quantiles = len(self.pre.quantiles)

    def run(self, output_names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        history, mask, freq, scaling = (np.asarray(feeds[k]) for k in ("history", "mask", "freq", "scaling"))
        out = np.zeros((len(history), self.pre.horizon, self.quantiles), dtype=np.float32)
        for i in range(len(history)):
            observed = np.flatnonzero(mask[i] > 0)
            if observed.size == 0:
                continue  # warm-up rows: nothing observed, forecast the location (0 in scaled units)
            loc, scale = float(scaling[i, 0]), float(scaling[i, 1])
            y = history[i, observed[0]:].astype(np.float64)
            seen = mask[i, observed[0]:] > 0
            positions = np.arange(len(y))
            y[~seen] = np.interp(positions[~seen], positions[seen], y[seen])
            frequency = FREQUENCIES[int(freq[i])]
            steps = min(self.pre.max_horizon.get(frequency, self.pre.horizon), self.pre.horizon)
            q = (fallback_forecast(y, frequency, steps) - loc) / scale
            out[i, :steps] = q
            out[i, steps:] = q[-1]
        return [out]


def numpy_session(manifest: Manifest, method_file: Path) -> ThetaSession:
    """The engine-numpy model of a forecast manifest: its JSON names the method."""
    method = json.loads(Path(method_file).read_text()).get("method")
    if method not in NUMPY_METHODS:
        raise ValueError(f"unknown forecast method {method!r}; known: {list(NUMPY_METHODS)}")
    if preprocess_as(manifest, ForecastPreprocess).contract != "global":
        raise ValueError("the numpy forecast methods read the global contract")
    return ThetaSession(manifest)
