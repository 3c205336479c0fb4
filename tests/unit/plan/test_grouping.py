"""SL -> VL grouping: the lane cost and the exact DP, checked against every set partition."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibqos.plan.grouping import lane_cost, optimal_grouping


def _set_partitions(items: list[int], k: int):  # type: ignore[no-untyped-def]
    if not items:
        if k == 0:
            yield []
        return
    first, rest = items[0], items[1:]
    for p in _set_partitions(rest, k - 1):
        yield [[first], *p]
    for p in _set_partitions(rest, k):
        for i in range(len(p)):
            yield [*p[:i], [first, *p[i]], *p[i + 1 :]]


def _brute_force(xs: list[float], lanes: int) -> float:
    k = min(lanes, len(xs))
    return min(
        math.fsum(lane_cost(xs[i] for i in group) for group in p)
        for p in _set_partitions(list(range(len(xs))), k)
    )


def test_lane_cost_charges_each_pair_its_heavier_member() -> None:
    assert lane_cost([0.5]) == 0.0
    assert lane_cost([0.1, 0.5]) == 0.5
    assert lane_cost([0.1, 0.5, 0.3]) == pytest.approx(0.5 + 0.5 + 0.3)


@pytest.mark.parametrize("seed", range(60))
def test_dp_matches_brute_force_over_all_set_partitions(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    xs = [rng.choice([rng.random(), round(rng.random(), 1), 0.0]) for _ in range(n)]
    lanes = rng.randint(1, n + 1)
    cost, groups = optimal_grouping(xs, lanes)
    assert cost == pytest.approx(_brute_force(xs, lanes), abs=1e-12)
    assert sorted(i for g in groups for i in g) == list(range(n))
    assert math.fsum(lane_cost(xs[i] for i in g) for g in groups) == pytest.approx(cost)


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=7),
    st.integers(1, 8),
)
def test_dp_is_optimal_property(xs: list[float], lanes: int) -> None:
    cost, groups = optimal_grouping(xs, lanes)
    assert cost == pytest.approx(_brute_force(xs, lanes), abs=1e-9)
    assert len(groups) == min(lanes, len(xs))


def test_heavy_sls_get_lanes_of_their_own_and_light_ones_share() -> None:
    xs = [0.9, 0.8, 0.05, 0.04, 0.03, 0.02]
    _, groups = optimal_grouping(xs, 3)
    assert groups == [[0], [1], [2, 3, 4, 5]]
