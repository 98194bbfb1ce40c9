"""Public holidays as a calendar regressor: `holidays:<CC>` or `holidays:<CC>-<SUBDIVISION>` (ISO 3166 codes, e.g.
'holidays:US', 'holidays:DE-BY') -> per timestamp, the number of public holidays in its bucket (0/1 at daily and
sub-daily frequencies, a count per week, month, quarter or year).

Why the maintained `holidays` package: the dates move (Easter, lunar calendars, observed days, new holidays) and differ
per country and region; hand-written tables go stale. A year's dates are cached per (country, subdivision, year), so a
service answering many requests for one country builds each year once.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from triserve.kernel.errors import ApiError

FEATURE = re.compile(r"^holidays:([A-Za-z]{2,3})(?:-([A-Za-z0-9]{1,10}))?$")
_MONTHS_PER_STEP = {"YS": 12, "QS": 3, "MS": 1}
_DAYS_PER_STEP = {"W": 7, "D": 1}  # sub-daily buckets lie within their day: 1


def parse(feature: str) -> tuple[str, str | None]:
    """'holidays:de-by' -> ('DE', 'BY'); a country or subdivision the package does not know -> 422."""
    match = FEATURE.match(feature)
    if match is None:
        raise ApiError(422, "unknown_calendar_feature", f"calendar feature {feature!r} is not one of 'weekday', "
                       "'month', 'holidays:<CC>' or 'holidays:<CC>-<SUBDIVISION>'", {"feature": feature})
    country, subdiv = match.group(1).upper(), match.group(2) and match.group(2).upper()
    import holidays  # only when a request asks for holidays: the rest of the family never needs the package

    supported = holidays.list_supported_countries()
    if country not in supported:
        raise ApiError(422, "unknown_holiday_country", f"no public holiday calendar for country {country!r} "
                       "(ISO 3166-1 codes, e.g. 'US', 'DE', 'JP')", {"feature": feature, "country": country})
    if subdiv is not None and subdiv not in supported[country]:
        raise ApiError(422, "unknown_holiday_subdivision", f"country {country!r} has no subdivision {subdiv!r}",
                       {"feature": feature, "country": country, "subdivision": subdiv,
                        "supported": list(supported[country])})
    return country, subdiv


@lru_cache(maxsize=512)
def _year(country: str, subdiv: str | None, year: int) -> tuple[np.datetime64, ...]:
    import holidays

    days = holidays.country_holidays(country, subdiv=subdiv, years=year)
    return tuple(sorted(np.datetime64(d, "D") for d in days))


def holiday_dates(country: str, subdiv: str | None, first: int, last: int) -> np.ndarray:
    """The public holidays of years first..last, sorted, as datetime64[D]."""
    days = [d for year in range(first, last + 1) for d in _year(country, subdiv, year)]
    return np.array(days, dtype="datetime64[D]")


def counts(stamps: np.ndarray, frequency: str, feature: str) -> np.ndarray:
    """How many public holidays fall in each timestamp's bucket [t, t + one step) (float, [n])."""
    country, subdiv = parse(feature)
    ts = np.asarray(stamps, dtype="datetime64[s]")
    if not len(ts):
        return np.zeros(0)
    if frequency in _MONTHS_PER_STEP:
        month = ts.astype("datetime64[M]")
        lo, hi = month.astype("datetime64[D]"), (month + _MONTHS_PER_STEP[frequency]).astype("datetime64[D]")
    else:
        lo = ts.astype("datetime64[D]")
        hi = lo + np.timedelta64(_DAYS_PER_STEP.get(frequency, 1), "D")
    years = lambda d: d.astype("datetime64[Y]").astype(np.int64) + 1970  # noqa: E731
    dates = holiday_dates(country, subdiv, int(years(lo).min()), int(years(hi).max()))
    return (np.searchsorted(dates, hi) - np.searchsorted(dates, lo)).astype(np.float64)
