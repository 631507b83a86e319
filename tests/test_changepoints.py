import numpy as np
import pytest

from specwatch.analysis.changepoints import change_points, trend


def test_a_shift_is_found_where_it_happened() -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(100, 2, 40), rng.normal(90, 2, 40)])
    (cp,) = change_points(values)
    assert cp.index == 40
    assert cp.change == pytest.approx(-0.10, abs=0.01) and cp.pvalue < 1e-6


def test_noise_alone_has_no_change_point() -> None:
    rng = np.random.default_rng(2)
    for seed in range(20):
        assert change_points(np.random.default_rng(seed).normal(55, 6, 60)) == []
    assert change_points(rng.normal(55, 6, 6)) == []  # too short to split: no error either


def test_two_shifts_and_trend() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(50, 1, 30), rng.normal(60, 1, 30), rng.normal(45, 1, 30)])
    assert [cp.index for cp in change_points(values)] == [30, 60]
    assert trend([100, 99, 98, 97, 96]) == pytest.approx(-1 / 98)
    assert trend([1.0, 2.0]) is None
