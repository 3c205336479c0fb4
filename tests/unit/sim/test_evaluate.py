"""The measure of a mix: S, the worst job, the gain over a baseline."""

from __future__ import annotations

import math

import pytest

from ibqos.errors import SimError
from ibqos.sim.evaluate import JobOutcome, Outcome, gain
from ibqos.sim.qos import Arbitration


def _outcome(*jobs: tuple[int, float, float]) -> Outcome:
    """An outcome of jobs given as (nodes, seconds alone, seconds sharing)."""
    arb = Arbitration({}, (0,) * 16, ((0, 32),), mtu=2048, name="x")
    out = tuple(
        JobOutcome(f"j{k}", n, 0, 0, alone, sharing) for k, (n, alone, sharing) in enumerate(jobs)
    )
    return Outcome("x", "fluid", 10, out, arb, 1.0, 0)


def test_s_weighs_jobs_by_nodes_not_by_the_length_of_their_iterations() -> None:
    # a 4-node job slowed 1.5x on 0.1 s iterations, a 12-node one 1.1x on 1 s
    mix = _outcome((4, 0.1, 0.15), (12, 1.0, 1.1))
    assert mix.slowdown == pytest.approx((4 * 1.5 + 12 * 1.1) / 16)
    assert mix.worst_slowdown == pytest.approx(1.5)
    assert mix.measure("worst-job") == pytest.approx(1.5)
    # total contention counts the long iterations' job twice the short one's
    assert mix.total_contention_s == pytest.approx(0.05 + 0.1)
    with pytest.raises(SimError, match="objective 'fastest'"):
        mix.measure("fastest")


def test_the_gain_is_the_share_of_the_baselines_excess_removed() -> None:
    base = _outcome((8, 1.0, 1.4))
    half = _outcome((8, 1.0, 1.2))
    assert half.gain(base) == pytest.approx(0.5)
    assert base.gain(half) == pytest.approx(-1.0)  # twice the excess: -100 %
    calm = _outcome((8, 1.0, 1.0))
    assert calm.gain(calm) == 0.0  # nothing to gain is no gain, not inf
    assert gain(1.0, 1.0) == 0.0 and math.isclose(gain(1.0, 1.3), 1.0)
