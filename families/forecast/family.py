"""The forecasting family: any series (9 frequencies, any finite scale) -> per-series scaled items (the series and
its backtest origins) -> model -> combined with classical methods by the backtest (ensemble.py) -> quantile
forecasts in the series' units."""
from __future__ import annotations

import numpy as np

from triserve.families.forecast.oip import OIP_INPUTS, OIP_OUTPUTS, ForecastOip
from triserve.families.forecast.oip_tables import BACKTEST, PANEL
from triserve.families.forecast.postprocess import check_forecast
from triserve.families.forecast.schemas import (
    BacktestRequest,
    BacktestResponse,
    ForecastRequest,
    ForecastResponse,
    PanelForecastRequest,
    PanelForecastResponse,
)
from triserve.families.forecast.series import SeriesForecaster
from triserve.kernel.family import Family, FamilyApi, RestRoute

ROUTES = (RestRoute("/v1/forecast", "application/json", ForecastRequest,
                    "Forecast the next points of a series: median and quantiles (50 % and 90 % intervals)"),
          RestRoute("/v1/forecast/panel", "application/json", PanelForecastRequest,
                    "Forecast many series in one request (a panel: ids, shared frequency and horizon)",
                    response=PanelForecastResponse, grpc="ForecastPanel", oip=PANEL),
          RestRoute("/v1/forecast/backtest", "application/json", BacktestRequest,
                    "Judge the forecaster on your own series: rolling origins, MASE/RMSSE per step, interval "
                    "coverage, the method at each origin", response=BacktestResponse, grpc="ForecastBacktest",
                    oip=BACKTEST))


class ForecastFamily(Family):
    name = "forecast"
    api = FamilyApi(request_model=ForecastRequest, response_model=ForecastResponse, routes=ROUTES,
                    grpc_method="Forecast",
                    oip=ForecastOip(alias="forecast", inputs=OIP_INPUTS, outputs=OIP_OUTPUTS,
                                    parameters=("start", "frequency", "horizon", "model")))

    def validate(self, view, request):
        return SeriesForecaster(view).validate(request)

    def parts(self, view, work):
        return SeriesForecaster(view).parts(work)

    def items(self, view, work, model):
        items = [SeriesForecaster.items(series, model) for series in work]
        return [item.x for its in items for item in its], items

    def respond(self, view, request, work, answers):
        return SeriesForecaster(view).respond(request, answers)

    def check_outputs(self, manifest, outputs):
        for out in outputs:
            check_forecast(np.asarray(out), manifest.preprocess)

    def agreement(self, manifest, served, shadow):
        """1 - mean relative difference of the medians (scaled units: the step's spread is ~1)."""
        pre = manifest.preprocess
        s, h = np.asarray(served, np.float64), np.asarray(shadow, np.float64)
        if pre.quantiles and s.ndim == 2 and h.ndim == 2:
            s, h = s[:, pre.quantiles.index(0.5)], h[:, pre.quantiles.index(0.5)]
        denom = np.maximum(np.abs(s), 1.0)
        return float(max(0.0, 1.0 - np.mean(np.abs(s - h) / denom)))


FAMILY = ForecastFamily()
