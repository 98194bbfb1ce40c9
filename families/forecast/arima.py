"""Short ARIMA candidates for the classical set, numpy only: ARIMA(p, d, 0) with the differencing order chosen by a
KPSS test and the autoregressive order by AICc (the Hyndman-Khandakar steps of auto.arima, without the MA terms).

Why: on short yearly and quarterly histories (GDP, population, prices) statsforecast's AutoARIMA beat every method of
the served set (held-out YS: AutoARIMA 0.592 vs 0.731 served). What wins there is a persistent growth RATE: an AR
term on the first differences (or a second difference) continues the recent acceleration that drift, Holt and Theta
average away; an AR on the level continues the stationary cycles (sunspots, lynx). The MA terms of auto.arima are
mostly covered by the exponential smoothing already in the set (ARIMA(0,1,1) = SES, (0,2,2) = Holt), so the orders
here are fitted by ordinary least squares: a few tiny solves per series, no optimiser.

  d  by KPSS (level stationarity, Newey-West variance with the usual lag rule): difference while the test rejects
     at 5 % (critical value 0.463), at most MAX_D times (auto.arima's default strategy)
  p  0 .. MAX_P by AICc of the OLS fit on the differenced series (a constant: the mean for d = 0, the drift for
     d = 1; none for d = 2, where a constant would be a quadratic trend)
The forecast runs the AR recursion `steps` ahead on the differences and integrates back.
"""
from __future__ import annotations

import numpy as np

MAX_P = 3
MAX_D = 2
KPSS_CRITICAL = 0.463  # 5 % critical value of the KPSS level-stationarity statistic
FIT_POINTS = 120  # the last points read: an ARIMA's orders describe recent dynamics


def kpss(x: np.ndarray) -> float:
    """The KPSS level-stationarity statistic of x (0 for a constant: nothing to difference)."""
    n = len(x)
    e = x - x.mean()
    s = np.cumsum(e)
    lags = int(np.floor(3 * np.sqrt(n) / 13))  # statsforecast / forecast::ndiffs's short lag rule
    lrv = float(e @ e) / n
    for k in range(1, min(lags, n - 1) + 1):
        lrv += 2 * (1 - k / (lags + 1)) * float(e[k:] @ e[:-k]) / n
    if lrv <= 1e-12 * max(float(np.mean(x * x)), 1e-300):
        return 0.0
    return float(s @ s) / (n * n * lrv)


def ndiffs(y: np.ndarray) -> int:
    """Differences needed for stationarity by repeated KPSS tests (at most MAX_D; a short series stops early)."""
    d, x = 0, y
    while d < MAX_D and len(x) >= 8 and kpss(x) > KPSS_CRITICAL:
        x = np.diff(x)
        d += 1
    return d


def _ar_fit(x: np.ndarray, p: int, const: bool) -> tuple[np.ndarray, float, int] | None:
    """OLS of x_t on (1,) x_(t-1) .. x_(t-p): (coefficients [const, phi_1..phi_p], AICc, observations)."""
    n = len(x) - p
    k = p + int(const)
    if n < k + 3:
        return None
    cols = ([np.ones(n)] if const else []) + [x[p - j - 1: len(x) - j - 1] for j in range(p)]
    target = x[p:]
    if k:
        design = np.stack(cols, axis=1)
        coef = np.linalg.lstsq(design, target, rcond=None)[0]
        resid = target - design @ coef
    else:
        coef, resid = np.zeros(0), target
    sse = max(float(resid @ resid), 1e-300)
    kk = k + 1  # the variance
    aicc = n * np.log(sse / n) + 2 * kk + 2 * kk * (kk + 1) / max(n - kk - 1, 1)
    return coef, float(aicc), n


def fit_order(y: np.ndarray) -> tuple[int, int, np.ndarray]:
    """(d, p, coefficients) of the chosen ARIMA(p, d, 0) of y (module docstring)."""
    y = np.asarray(y, np.float64)[-FIT_POINTS:]
    d = ndiffs(y)
    x = np.diff(y, n=d) if d else y
    const = d < 2
    best: tuple[float, int, np.ndarray] | None = None
    for p in range(MAX_P + 1):
        fit = _ar_fit(x, p, const)
        if fit is not None and (best is None or fit[1] < best[0]):
            best = (fit[1], p, fit[0])
    if best is None:
        return d, 0, np.array([float(np.mean(x))]) if const and len(x) else np.zeros(0)
    return d, best[1], best[2]


def forecast(y: np.ndarray, steps: int) -> np.ndarray:
    """The chosen ARIMA(p, d, 0)'s point forecast [steps] of y."""
    y = np.asarray(y, np.float64)
    d, p, coef = fit_order(y)
    tail = y[-FIT_POINTS:]
    x = list(np.diff(tail, n=d) if d else tail)
    const = d < 2
    c = float(coef[0]) if const and len(coef) else 0.0
    phi = coef[1:] if const else coef
    out = np.empty(steps)
    for k in range(steps):
        v = c + sum(float(phi[j]) * x[-1 - j] for j in range(p))
        x.append(v)
        out[k] = v
    for level in range(d, 0, -1):  # integrate: the last value of each lower-order difference is the anchor
        anchor = float(np.diff(tail, n=level - 1)[-1]) if level > 1 else float(tail[-1])
        out = anchor + np.cumsum(out)
    return out
