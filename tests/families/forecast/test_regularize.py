import numpy as np
import pytest

from triserve.families.forecast.preprocess import SeriesError, future_timestamps, regularize


def months(*ym):
    return np.array([f"{y:04d}-{m:02d}-01" for y, m in ym], dtype="datetime64[s]")


def test_sorts_merges_duplicates_and_imputes_gaps():
    ts = months((2020, 3), (2020, 1), (2020, 1), (2020, 5))
    values = np.array([30.0, 10.0, 12.0, 50.0])
    regular, last, report = regularize(values, ts, "MS", max_points=100, max_gap_fraction=0.5)
    # Jan = mean(10, 12) = 11, Feb imputed between 11 and 30, Mar 30, Apr imputed, May 50
    assert regular.tolist() == [11.0, 20.5, 30.0, 40.0, 50.0]
    assert report == {"sorted": True, "duplicates_merged": 1, "imputed": 2, "points": 5}
    assert last == np.datetime64("2020-05-01T00:00:00")


def test_off_grid_points_fall_into_their_month_and_nan_is_missing():
    ts = np.array(["2021-01-15", "2021-02-03", "2021-03-28", "2021-04-01"], dtype="datetime64[s]")
    regular, _, report = regularize(np.array([1.0, np.nan, 3.0, 4.0]), ts, "MS", 100, 0.5)
    assert regular.tolist() == [1.0, 2.0, 3.0, 4.0] and report["imputed"] == 1


def test_fixed_frequency_and_future_timestamps():
    ts = np.datetime64("2024-01-01T00:00:00") + np.arange(4) * np.timedelta64(1, "h")
    regular, last, _ = regularize(np.arange(4.0), ts, "h", 100, 0.2)
    assert future_timestamps(last, "h", 2).tolist() == [np.datetime64("2024-01-01T04:00:00"),
                                                        np.datetime64("2024-01-01T05:00:00")]
    assert future_timestamps(np.datetime64("2024-12-01T00:00:00"), "MS", 2).tolist() == [
        np.datetime64("2025-01-01T00:00:00"), np.datetime64("2025-02-01T00:00:00")]


def test_quarterly_and_yearly_buckets_are_calendar_periods():
    ts = np.array(["2020-02-10", "2020-03-31", "2020-05-01", "2020-12-31"], dtype="datetime64[s]")
    regular, last, report = regularize(np.array([1.0, 3.0, 5.0, 9.0]), ts, "QS", 100, 0.5)
    # Q1 = mean(1, 3), Q2 = 5, Q3 imputed, Q4 = 9; the last bucket starts on 1 October
    assert regular.tolist() == [2.0, 5.0, 7.0, 9.0] and report["duplicates_merged"] == 1
    assert last == np.datetime64("2020-10-01T00:00:00")
    assert future_timestamps(last, "QS", 2).tolist() == [np.datetime64("2021-01-01T00:00:00"),
                                                         np.datetime64("2021-04-01T00:00:00")]
    years = np.array(["2001-07-01", "2002-01-01", "2003-12-31"], dtype="datetime64[s]")
    regular, last, _ = regularize(np.array([1.0, 2.0, 3.0]), years, "YS", 100, 0.0)
    assert regular.tolist() == [1.0, 2.0, 3.0] and last == np.datetime64("2003-01-01T00:00:00")


@pytest.mark.parametrize("frequency,step", [("30min", 1800), ("15min", 900), ("min", 60)])
def test_sub_hourly_steps(frequency, step):
    ts = np.datetime64("2024-01-01T00:00:00") + np.array([0, 1, 3]) * np.timedelta64(step, "s")
    regular, last, report = regularize(np.array([1.0, 2.0, 4.0]), ts, frequency, 100, 0.5)
    assert regular.tolist() == [1.0, 2.0, 3.0, 4.0] and report["imputed"] == 1
    assert last == ts[-1]


def test_extreme_but_finite_scales_pass_through_exactly():
    ts = np.datetime64("2024-01-01") + np.arange(3) * np.timedelta64(1, "D")
    for values in ([1e-6, 2e-6, 3e-6], [1e12, 1e12 + 1, 1e12 + 2], [5.0, 5.0, 5.0]):
        regular, _, _ = regularize(np.array(values), ts, "D", 100, 0.2)
        assert regular.tolist() == values


@pytest.mark.parametrize("values,ts,code", [
    ([1.0, np.inf], months((2020, 1), (2020, 2)), "non_finite_value"),
    ([np.nan, np.nan], months((2020, 1), (2020, 2)), "no_values"),
    ([1.0, 2.0], months((2020, 1), (2020, 12)), "too_many_missing"),
    ([1.0, 2.0], months((1000, 1), (2020, 12)), "series_too_long"),
    ([1.0], months((2020, 1), (2020, 2)), "length_mismatch"),
    ([1e308, 1.7e308], np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[s]"), "non_finite_value"),
])
def test_refusals_have_codes(values, ts, code):
    with pytest.raises(SeriesError) as err:
        regularize(np.array(values), ts, "MS", max_points=1000, max_gap_fraction=0.2)
    assert err.value.code == code
