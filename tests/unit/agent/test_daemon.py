"""The daemon's cadence on an injected clock: no drift, missed ticks skipped."""

from __future__ import annotations

import itertools

import pytest

from ibqos.agent.daemon import next_tick


@pytest.mark.parametrize(
    ("k", "now", "want"),
    [
        (0, 0.0, 1),  # start: the first tick is one interval away
        (1, 10.3, 2),  # a 0.3 s cycle after tick 1: tick 2 at 20 s, not 20.3 s
        (2, 29.99, 3),  # a cycle that nearly filled its interval: still the next tick
        (3, 30.0, 4),  # exactly on tick 3's time after tick 3: tick 4
        (3, 40.0, 5),  # tick 3's cycle ended on tick 4's time: tick 4 is past, wait for 5
        (3, 67.5, 7),  # it overran by 3.75 intervals: ticks 4-6 are skipped, not bunched
    ],
)
def test_next_tick(k: int, now: float, want: int) -> None:
    assert next_tick(0.0, 10.0, k, now) == want


def test_no_drift_over_many_cycles() -> None:
    """Cycles that each take 0.9 of the interval start on the grid every time."""
    start, interval, now, k = 100.0, 2.0, 100.0, 0
    starts = []
    for _ in range(1000):
        k = next_tick(start, interval, k, now)
        now = max(now, start + k * interval)  # the wait
        starts.append(now)
        now += 0.9 * interval  # the cycle
    assert starts[-1] == start + 1000 * interval
    assert all(b - a == interval for a, b in itertools.pairwise(starts))
