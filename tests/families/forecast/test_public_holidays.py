"""Public holidays as a calendar feature (families/forecast/public_holidays.py): counts per bucket at every kind of
frequency, unknown countries and subdivisions refused; through a real server a holiday in the horizon moves the
forecast, and a bad code or a calendar without a time axis gets a clear 422."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from triserve.families.forecast.covariates import calendar
from triserve.families.forecast.preprocess import series_timestamps
from triserve.kernel.errors import ApiError

N, H = 547, 7  # 2023-01-01 .. 2024-06-30, then 2024-07-01 .. 07-07 (July 4th inside)


def stamps(start: str, frequency: str, n: int) -> np.ndarray:
    return series_timestamps(np.datetime64(start, "s"), frequency, n)


def test_holidays_per_bucket_at_daily_monthly_and_hourly_steps():
    names, x = calendar(stamps("2024-07-03", "D", 3), ["holidays:US"], "D")
    assert names == ["holidays:US"] and x[:, 0].tolist() == [0, 1, 0]
    # January: New Year + MLK day; November: Veterans Day + Thanksgiving; March: none
    _, x = calendar(stamps("2024-01-01", "MS", 12), ["holidays:us"], "MS")
    assert x[0, 0] == 2 and x[6, 0] == 1 and x[10, 0] == 2 and x[11, 0] == 1 and x[2, 0] == 0
    _, x = calendar(stamps("2024-07-03T22:00:00", "h", 4), ["holidays:US"], "h")
    assert x[:, 0].tolist() == [0, 0, 1, 1]
    _, x = calendar(stamps("2024-01-01", "QS", 4), ["holidays:DE-BY"], "QS")
    _, federal = calendar(stamps("2024-01-01", "QS", 4), ["holidays:DE"], "QS")
    assert x.sum() > federal.sum()  # Bavaria adds Epiphany, Corpus Christi, ...


@pytest.mark.parametrize("feature,code", [("holidays:XX", "unknown_holiday_country"),
                                          ("holidays:US-ZZ", "unknown_holiday_subdivision"),
                                          ("season", "unknown_calendar_feature")])
def test_unknown_calendars_are_refused(feature, code):
    with pytest.raises(ApiError) as err:
        calendar(stamps("2024-01-01", "D", 5), [feature], "D")
    assert err.value.status == 422 and err.value.code == code


def holiday_demand() -> list[float]:
    """Daily demand 100 that drops by 40 on US public holidays (2023-01-01 .. 2024-06-30)."""
    _, x = calendar(stamps("2023-01-01", "D", N), ["holidays:US"], "D")
    rng = np.random.default_rng(0)
    return (100 - 40 * x[:, 0] + rng.normal(0, 3, N)).round(3).tolist()


def post(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/forecast", json=body, timeout=60)


def test_a_holiday_in_the_horizon_moves_the_forecast_through_a_real_server(server):
    body = {"values": holiday_demand(), "start": "2023-01-01T00:00:00", "frequency": "D", "horizon": H,
            "calendar": ["holidays:US"]}
    resp = post(server, body)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    [effect] = answer["input"]["covariates"]["effects"]
    assert effect["name"] == "holidays:US" and effect["used"] and effect["effect"] == pytest.approx(-40, abs=3)
    point = {p["timestamp"][:10]: p["point"] for p in answer["forecast"]}
    assert point["2024-07-04"] == pytest.approx(60, abs=8)
    assert all(abs(v - 100) < 8 for day, v in point.items() if day != "2024-07-04")


@pytest.mark.parametrize("change,code", [
    (lambda b: b.update(calendar=["holidays:XX"]), "unknown_holiday_country"),
    (lambda b: b.update(calendar=["holidays:US-ZZ"]), "unknown_holiday_subdivision"),
    (lambda b: b.update(calendar=["easter"]), "validation_error"),
    (lambda b: b.pop("frequency"), "validation_error"),  # start without a frequency: no time axis to read
])
def test_bad_holiday_calendars_get_a_clear_422(server, change, code):
    body = {"values": holiday_demand()[:60], "start": "2023-01-01T00:00:00", "frequency": "D", "horizon": H,
            "calendar": ["holidays:US"]}
    change(body)
    resp = post(server, body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == code, resp.text
