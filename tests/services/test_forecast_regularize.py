import numpy as np
import pytest

from families.forecast.preprocess import SeriesError, future_timestamps, regularize


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
    assert future_timestamps(last, "h", 2) == [np.datetime64("2024-01-01T04:00:00"),
                                               np.datetime64("2024-01-01T05:00:00")]
    assert future_timestamps(np.datetime64("2024-12-01T00:00:00"), "MS", 2) == [
        np.datetime64("2025-01-01T00:00:00"), np.datetime64("2025-02-01T00:00:00")]


@pytest.mark.parametrize("values,ts,code", [
    ([1.0, np.inf], months((2020, 1), (2020, 2)), "non_finite_value"),
    ([np.nan, np.nan], months((2020, 1), (2020, 2)), "no_values"),
    ([1.0, 2.0], months((2020, 1), (2020, 12)), "too_many_missing"),
    ([1.0, 2.0], months((1000, 1), (2020, 12)), "series_too_long"),
    ([1.0], months((2020, 1), (2020, 2)), "length_mismatch"),
])
def test_refusals_have_codes(values, ts, code):
    with pytest.raises(SeriesError) as err:
        regularize(np.array(values), ts, "MS", max_points=1000, max_gap_fraction=0.2)
    assert err.value.code == code
