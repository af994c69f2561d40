"""Group-sequential levels: the published bounds, and the union bound's increments as floor."""

from __future__ import annotations

import pytest

from pipeline.statistics.distributions import normal_quantile
from pipeline.statistics.group_sequential import look_levels
from pipeline.statistics.sequential import hwang_shih_decani_spent, obrien_fleming_spent


def boundaries(fractions: list[float], alpha: float) -> list[float]:
    levels = look_levels(fractions, [obrien_fleming_spent(t, alpha) for t in fractions])
    return [-normal_quantile(level) for level in levels]


def test_lan_demets_obrien_fleming_boundaries_as_published() -> None:
    """Five equally spaced looks, one-sided 2.5%: gsDesign's sfLDOF upper bounds."""
    assert boundaries([k / 5 for k in range(1, 6)], 0.025) == pytest.approx(
        [4.8769, 3.3569, 2.6803, 2.2898, 2.0310], abs=2e-3)


def test_one_look_is_the_fixed_sample_level() -> None:
    assert look_levels([1.0], [0.05]) == pytest.approx([0.05])


def test_each_level_is_at_least_its_increment() -> None:
    """The union bound gives each look only its increment; the exact level is never below
    it, and the last look's is above it (the looks share their rounds)."""
    fractions = [k / 6 for k in range(1, 7)]
    spent = [obrien_fleming_spent(t, 0.05) for t in fractions]
    increments = [b - a for a, b in zip([0.0, *spent[:-1]], spent, strict=True)]
    levels = look_levels(fractions, spent)
    assert all(level >= increment * 0.999 for level, increment in zip(levels, increments,
                                                                      strict=True))
    assert levels[-1] > 2 * increments[-1]


def test_a_look_that_spends_nothing_has_no_reachable_bound() -> None:
    assert look_levels([0.5, 1.0], [0.0, 0.05])[0] < 1e-12


def test_hwang_shih_decani_spending() -> None:
    """alpha (1 - e^(-gamma t)) / (1 - e^(-gamma)): linear at gamma 0, little early for a
    negative gamma, much early for a positive one; all of alpha at the cap."""
    assert hwang_shih_decani_spent(0.5, 0.05, 0.0) == pytest.approx(0.025)
    assert hwang_shih_decani_spent(0.5, 0.05, -4.0) == pytest.approx(
        0.05 * (1 - 7.389056) / (1 - 54.59815), rel=1e-6)
    assert hwang_shih_decani_spent(0.5, 0.05, 1.0) > 0.025
    assert all(hwang_shih_decani_spent(1.0, 0.05, gamma) == 0.05 for gamma in (-4, 0, 1))
    # The first look's level is what was spent by then: no earlier look to share with.
    spent = [hwang_shih_decani_spent(k / 4, 0.05, -2.0) for k in range(1, 5)]
    assert look_levels([k / 4 for k in range(1, 5)], spent)[0] == pytest.approx(spent[0])
