"""What the forecast family records in a model's manifest: the model's serving contract (models/manifest.py
assembles every family's record into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from triserve.families.forecast.features import FREQUENCIES


class ForecastPreprocess(BaseModel):
    """How the service turns a series into this model's inputs and its outputs back into a forecast.

    contract "global": triserve's global-model inputs (families/forecast/features.py: context, mask, freq, features,
    per-series mean/mean-absolute-deviation scaling, left padding with a mask), output [batch, horizon, quantiles].
    contract "window": one input [batch, context] holding the last `context` points (scaled as `scaling` says), output
    [batch, horizon] (a point forecast) or [batch, horizon, quantiles]: the shape most users' own ONNX forecasters
    have (families/forecast/importers/onnx_graph.py).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["forecast"] = "forecast"
    contract: Literal["global", "window"] = Field(description="Input layout (see the class docstring).")
    context: int = Field(gt=0, description="Points of the input window (global: the padded context length).")
    horizon: int = Field(gt=0, description="Steps the graph outputs.")
    frequencies: list[str] = Field(min_length=1, description="Frequencies the model serves.")
    max_horizon: dict[str, int] = Field(description="Longest horizon served per frequency (<= horizon).")
    context_by_frequency: dict[str, int] = Field(
        default_factory=dict, description="global: history points read per frequency (<= context; default all).")
    quantiles: list[float] = Field(default_factory=list,
                                   description="Quantile levels of the output's last axis; empty: a point forecast.")
    scaling: Literal["mean_abs", "none"] = Field(
        "mean_abs", description="mean_abs: (x - mean) / mean absolute deviation of the window, undone on the "
                                "output; none: raw values in and out.")
    min_history: int = Field(gt=0, description="Fewest regular points forecast (window: its context).")
    season: dict[str, int] = Field(default_factory=dict, description="Seasonal period per frequency.")

    @model_validator(mode="after")
    def _consistent(self) -> ForecastPreprocess:
        unknown = sorted(set(self.frequencies) - set(FREQUENCIES))
        if unknown:
            raise ValueError(f"unsupported frequencies {unknown}; known: {list(FREQUENCIES)}")
        missing = sorted(set(self.frequencies) - set(self.max_horizon))
        if missing:
            raise ValueError(f"max_horizon lacks {missing}")
        too_long = {f: h for f, h in self.max_horizon.items() if not 0 < h <= self.horizon}
        if too_long:
            raise ValueError(f"max_horizon must lie in 1..horizon ({self.horizon}): {too_long}")
        if any(not 0 < q < 1 for q in self.quantiles) or self.quantiles != sorted(set(self.quantiles)):
            raise ValueError("quantiles must be increasing levels in (0, 1)")
        if self.quantiles and 0.5 not in self.quantiles:
            raise ValueError("a quantile output must include the median (0.5): it is the point forecast")
        if self.contract == "global" and self.scaling != "mean_abs":
            raise ValueError("the global contract scales each series by its mean and mean absolute deviation "
                             "(scaling mean_abs)")
        if self.contract == "window" and self.min_history < self.context:
            raise ValueError("a window model needs min_history >= context (it has no padding mask)")
        return self


Preprocess = ForecastPreprocess
