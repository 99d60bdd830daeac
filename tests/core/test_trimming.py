from __future__ import annotations

import pytest

from kvwise.core.trimming import stable_cut


def test_nothing_is_cut_while_the_history_fits() -> None:
    assert stable_cut([10, 10, 10], 30) == 0


def test_low_water_one_drops_just_enough() -> None:
    assert stable_cut([10, 10, 10, 10], 30, low_water=1.0) == 1


def test_half_budget_cut_drops_more_once_and_then_holds() -> None:
    costs = [10] * 4
    assert stable_cut(costs, 30, low_water=0.5) == 3  # 40 > 30: down to <= 15
    assert stable_cut([*costs, 10], 30, low_water=0.5) == 3  # the next turn keeps the same start


def test_the_newest_unit_stays_even_alone_over_budget() -> None:
    assert stable_cut([10, 50], 30) == 1


def test_low_water_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="low_water"):
        stable_cut([1], 10, low_water=0.0)
