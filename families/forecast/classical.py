"""Classical forecasting methods fitted on the client's own series, numpy only: the candidates the ensemble
(ensemble.py) weighs against the global model by a backtest on the same series.

Why these: each is the textbook-exact answer for one shape a user tries first, and together they are the M4
benchmarks' building blocks (naive, seasonal naive, SES, Holt/damped Holt, Theta, drift):
  naive            last value                      exact on a constant and after a level shift
  seasonal_naive   last season repeated            exact on a pure season
  seasonal_naive2  last long season (weekly at h)  exact on a daily x weekly double season
  drift            last value + mean step          exact on a linear trend
  damped_drift     steps that shrink geometrically  exact on a damped trend
  seasonal_drift   last season + mean seasonal step  exact on linear trend + additive season
  log_drift        drift of log(y), positive y     exact on exponential growth
  ses              simple exponential smoothing    noisy level (on the seasonally adjusted series)
  damped_holt      ETS(A,Ad,N) / (A,A,N), by grid   local trends, flattening or not (seasonally adjusted series)
  theta            the standard Theta method       theta.py, the M3 winner
  seasonal_mean    mean of the last seasons        noisy season (average profile, not the last noisy copy)
  tsb              Teunter-Syntetos-Babai          intermittent demand (many zeros): the mean demand rate
  arima            ARIMA(p,d,0), KPSS d, AICc p     persistent growth rates and cycles (arima.py; seasonally adjusted)
  mstl             daily x weekly profile + level   two seasons at sub-daily steps, MSTL-style (closed form)
Every method returns a point forecast [steps] in the series' units; which ones apply depends only on the series'
length, sign and zeros (`applicable`), so a backtest origin and the final fit use the same set. The fits are
bounded: exponential smoothing reads the last FIT_POINTS points (a few milliseconds per series in all).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from triserve.families.forecast import arima as _arima
from triserve.families.forecast.theta import seasonal_adjust

FIT_POINTS = 240  # points the smoothing fits read (a trend or level is local; older points only cost time)
# One smoothing grid: damped Holt (alpha x beta* x phi, beta = alpha * beta*) and SES (alpha alone, no trend)
_A, _B, _P = np.meshgrid([0.05, 0.15, 0.3, 0.5, 0.75, 1.0], [0.02, 0.1, 0.3], [0.8, 0.9, 0.98, 1.0], indexing="ij")
_SES_ALPHA = np.linspace(0.02, 1.0, 15)
_GRID_ALPHA = np.concatenate([_A.ravel(), _SES_ALPHA])
_GRID_BETA = np.concatenate([(_A * _B).ravel(), np.zeros(_SES_ALPHA.size)])
_GRID_PHI = np.concatenate([_P.ravel(), np.ones(_SES_ALPHA.size)])
_GRID_SES = np.arange(_GRID_ALPHA.size) >= _A.size


def _steps(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float64)


def naive(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    return np.full(steps, y[-1])


def seasonal_naive(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    k = np.arange(steps)
    return y[len(y) - m + k % m]


def drift(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    return y[-1] + _steps(steps) * (y[-1] - y[0]) / (len(y) - 1)


def damped_drift(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """A trend that flattens geometrically: the steps d_t = y_t - y_(t-1) of the last 2h are taken as c phi^t; phi
    from the ratio of the mean step of the later half to the earlier half (= phi^h exactly), the current step from the
    later half's mean moved to the end. Without a damping trend (steps change sign, or grow) it is drift."""
    d = np.diff(y)
    h = len(d) // 2
    if h < 1:
        return drift(y, steps, m)
    early, late = float(np.mean(d[-2 * h: -h])), float(np.mean(d[-h:]))
    if early * late <= 0 or abs(late) >= abs(early):
        return drift(y, steps, m)
    phi = (late / early) ** (1.0 / h)
    if phi > 1 - 1e-9:  # steps all but constant: that is drift
        return drift(y, steps, m)
    current = late * phi ** (h - 1) * h * (1 - phi) / (1 - phi ** h)  # c phi^(2h-1) from the later half's mean
    return y[-1] + current * np.cumsum(phi ** _steps(steps))


def seasonal_drift(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """Last season + the mean change between seasons: y_{n+k} = y_{n-m+k%m} + b m (k//m + 1), b the mean of
    (y_t - y_{t-m}) / m, which is the slope itself on a linear trend plus an additive season."""
    k = np.arange(steps)
    b = float(np.mean(y[m:] - y[:-m])) / m
    return y[len(y) - m + k % m] + b * m * (k // m + 1)


def log_drift(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """Drift of log(y): exponential growth; where the history is not all positive, plain drift."""
    if np.any(y <= 0):
        return drift(y, steps, m)
    return np.exp(drift(np.log(y), steps, m))


def seasonal_mean(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """The mean of the last (up to 4) seasons at each position, moved to the last season's level."""
    seasons = min(4, len(y) // m)
    block = y[len(y) - seasons * m:].reshape(seasons, m)
    profile = block.mean(axis=0) - block.mean() + block[-1].mean()
    return profile[np.arange(steps) % m]


def mstl(y: np.ndarray, steps: int, m: int, m2: int) -> np.ndarray:
    """Two seasons (daily x weekly at sub-daily steps), MSTL-style but closed-form, over the last K <= 4 long
    seasons: the long season is the short season's profile (averaged over every short cycle: low noise) + a level per
    short cycle of the long one (day of week) + what remains of the long season's own profile, shrunk by K / (K + 2)
    (each position of it is an average of only K values); the level is the seasonally adjusted mean of the last short
    cycle. Exact on a daily x weekly double season; steadier than the last long season's mean (seasonal_mean2)."""
    k = min(4, len(y) // m2)
    x = np.asarray(y[len(y) - k * m2:], np.float64)
    per = m2 // m
    days = x.reshape(k, per, m)
    short = days.mean(axis=(0, 1))
    short = short - short.mean()
    dow = days.mean(axis=(0, 2))
    dow = dow - dow.mean()
    base = (dow[:, None] + short[None, :]).ravel()  # [m2]
    rest = x.reshape(k, m2).mean(axis=0) - x.mean() - base
    season = base + rest * k / (k + 2.0)
    level = float(np.mean(x[-m:] - season[-m:]))
    return level + season[np.arange(steps) % m2]


def smoothing(histories: list[np.ndarray], steps: list[int], seasons: list[int]) -> list[dict[str, np.ndarray]]:
    """ses, damped_holt and theta of each history from ONE pass over its seasonally adjusted last FIT_POINTS points:
    the grid holds ETS(A,Ad,N) (alpha x beta x phi) and SES (beta 0) side by side, each picked by least one-step
    squared error; Theta is SES's level plus half the OLS slope (Hyndman & Billah 2003, as theta.py). Histories whose
    windows have the same length (a long series, its backtest cuts, other long series of a batch) share one recursion
    over [rows, grid]: the Python loop over time is the cost, not the arithmetic."""
    adjusted = [seasonal_adjust(np.asarray(y, np.float64)[-FIT_POINTS:], m) for y, m in zip(histories, seasons)]
    out: list[dict[str, np.ndarray]] = [{} for _ in histories]
    by_length: dict[int, list[int]] = {}
    for i, (adj, _) in enumerate(adjusted):
        by_length.setdefault(len(adj), []).append(i)
    for n, rows in by_length.items():
        adj = np.stack([adjusted[i][0] for i in rows])  # [R, n]
        level = np.repeat(adj[:, :1], _GRID_ALPHA.size, axis=1)
        trend = np.where(_GRID_SES, 0.0, (adj[:, min(1, n - 1)] - adj[:, 0])[:, None])
        sse = np.zeros(level.shape)
        for t in range(1, n):
            fitted = level + _GRID_PHI * trend
            e = adj[:, t, None] - fitted
            sse += e * e
            level = fitted + _GRID_ALPHA * e
            trend = _GRID_PHI * trend + _GRID_BETA * e
        holt = np.argmin(np.where(_GRID_SES, np.inf, sse), axis=1)
        simple = np.argmin(np.where(_GRID_SES, sse, np.inf), axis=1)
        x = np.arange(n, dtype=np.float64)
        slope = ((adj * (x - x.mean())).sum(axis=1) / max(float(((x - x.mean()) ** 2).sum()), 1e-300)
                 if n > 2 else np.zeros(len(rows)))
        for r, i in enumerate(rows):
            k = _steps(steps[i])
            reseason = adjusted[i][1]
            a, h = _GRID_ALPHA[simple[r]], holt[r]
            theta_point = level[r, simple[r]] + 0.5 * slope[r] * ((k - 1) + 1 / a - (1 - a) ** n / a)
            out[i] = {"ses": reseason(np.full(steps[i], level[r, simple[r]]), steps[i]),
                      "damped_holt": reseason(level[r, h] + np.cumsum(_GRID_PHI[h] ** k) * trend[r, h], steps[i]),
                      "theta": reseason(theta_point, steps[i])}
    return out


def tsb(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """Teunter-Syntetos-Babai: smoothed probability of demand x smoothed size of non-zero demand (alpha 0.1, beta
    0.1, the usual fixed values: intermittent series are too sparse to fit them)."""
    nonzero = y[y != 0]
    p, z = float(np.mean(y != 0)), float(nonzero[0]) if nonzero.size else 0.0
    for v in y[-FIT_POINTS:]:
        p += 0.1 * ((v != 0) - p)
        if v != 0:
            z += 0.1 * (v - z)
    return np.full(steps, p * z)


def arima(y: np.ndarray, steps: int, m: int) -> np.ndarray:
    """ARIMA(p, d, 0) by KPSS and AICc (arima.py) on the seasonally adjusted last arima.FIT_POINTS points."""
    adj, reseason = seasonal_adjust(np.asarray(y, np.float64)[-_arima.FIT_POINTS:], m)
    return reseason(_arima.forecast(adj, steps), steps)


SIMPLE: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "naive": naive, "seasonal_naive": seasonal_naive, "drift": drift, "damped_drift": damped_drift,
    "seasonal_drift": seasonal_drift, "log_drift": log_drift, "seasonal_mean": seasonal_mean, "tsb": tsb,
    "arima": arima}
SMOOTHING = ("ses", "damped_holt", "theta")


def intermittent(y: np.ndarray) -> bool:
    """Non-negative counts with at least 30 % zeros: demand, not a level."""
    return bool(np.all(y >= 0) and np.mean(y == 0) >= 0.3)


ARIMA_MIN_POINTS = 8  # fewer: the KPSS test and an AR fit have nothing to stand on
MEAN_METHODS = ("tsb", "ses", "seasonal_mean", "seasonal_mean2")


def applicable(y: np.ndarray, m: int, m2: int, demand: bool = False) -> list[tuple[str, int]]:
    """(method, its season) pairs that can fit this history (the shortest one of a backtest decides for all).
    demand (an intermittent series): only the methods that forecast the mean demand rate (MEAN_METHODS)."""
    n = len(y)
    if demand:
        return [(name, s) for name, s in applicable(y, m, m2) if name in MEAN_METHODS] + [("tsb", m)]
    out = [("naive", m), ("drift", m), ("damped_drift", m), ("ses", m), ("damped_holt", m), ("theta", m)]
    if m > 1 and n >= m:
        out.append(("seasonal_naive", m))
    if m > 1 and n >= 2 * m:
        out += [("seasonal_drift", m), ("seasonal_mean", m)]
    if m2 > m and n >= 2 * m2:
        out += [("seasonal_naive2", m2), ("seasonal_mean2", m2)]
        if m > 1 and m2 % m == 0 and m2 // m <= 7:  # daily x weekly (not weeks x a year at D)
            out.append(("mstl", m2))
    if n >= ARIMA_MIN_POINTS:
        out.append(("arima", m))
    if np.all(y > 0):
        out.append(("log_drift", m))  # the shortest history decides: guard the longer ones in log_drift too
    return out


def forecasts(histories: list[np.ndarray], steps: list[int],
              methods: list[list[tuple[str, int]]]) -> list[dict[str, np.ndarray]]:
    """Point forecasts [steps[i]] of each (method, season) of `applicable` in methods[i] for each history (a trailing
    2 in a name: the long season's twin); the smoothing methods of all histories are fitted together."""
    smooth = [i for i, ms in enumerate(methods) if any(name in SMOOTHING for name, _ in ms)]
    fits = smoothing([histories[i] for i in smooth], [steps[i] for i in smooth],
                     [next(m for name, m in methods[i] if name in SMOOTHING) for i in smooth])
    smoothed: list[dict[str, np.ndarray]] = [{} for _ in histories]
    for i, fit in zip(smooth, fits):
        smoothed[i] = fit
    return [{name: smoothed[i][name] if name in SMOOTHING else _simple(name, y, steps[i], m, methods[i])
             for name, m in methods[i]} for i, y in enumerate(histories)]


def _simple(name: str, y: np.ndarray, steps: int, m: int, methods: list[tuple[str, int]]) -> np.ndarray:
    if name == "mstl":  # its season is the long one; the short one is the series' first method's
        return mstl(y, steps, methods[0][1], m)
    return SIMPLE[name.removesuffix("2")](y, steps, m)
