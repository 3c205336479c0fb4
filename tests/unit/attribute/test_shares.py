"""A link's counter regressed on the jobs' injections over the last sweeps."""

from __future__ import annotations

import numpy as np
import pytest

from ibqos.attribute.shares import WINDOW, LinkShares

# link 0: jobs 0 and 1; link 1: jobs 1 and 2; link 2: job 2 alone (not regressed)
INC_PORT = np.array([0, 0, 1, 1, 2], dtype=np.int64)
INC_JOB = np.array([0, 1, 1, 2, 2], dtype=np.int64)
SHARE = {(0, 0): 0.25, (0, 1): 0.5, (1, 1): 0.1, (1, 2): 0.75, (2, 2): 0.4}
IDS = ("a", "b", "c")


def links(injection: np.ndarray, background: float = 0.0) -> np.ndarray:
    out = np.zeros(3)
    for (port, job), share in SHARE.items():
        out[port] += share * injection[job]
    return out + background


def feed(shares: LinkShares, injections: list[np.ndarray], background: float = 0.0):
    result = None
    for inj in injections:
        result = shares.add(IDS, inj, links(inj, background), INC_PORT, INC_JOB)
    return result


def found(result) -> dict[tuple[int, int], float]:
    return {
        (int(p), int(j)): float(a)
        for p, j, a in zip(result.port, result.job, result.share, strict=True)
    }


def test_injections_that_move_apart_give_every_jobs_share_of_a_shared_link():
    rng = np.random.default_rng(3)
    result = feed(LinkShares(3), [rng.uniform(1e9, 5e9, 3) for _ in range(10)], 2e7)
    got = found(result)
    assert set(got) == {(0, 0), (0, 1), (1, 1), (1, 2)}  # link 2 has one job: no need
    for k, share in got.items():
        assert share == pytest.approx(SHARE[k], abs=1e-6)


def test_steady_or_lockstep_injections_give_nothing():
    steady = [np.array([1e9, 2e9, 3e9]) * (1 + 1e-4 * k) for k in range(12)]
    assert len(feed(LinkShares(3), steady).port) == 0
    rng = np.random.default_rng(4)
    lockstep = [np.array([1e9, 2e9, 3e9]) * rng.uniform(0.2, 1.0) for _ in range(12)]
    assert len(feed(LinkShares(3), lockstep).port) == 0  # one factor: jobs not apart


def test_too_few_sweeps_give_nothing_and_the_window_is_bounded():
    rng = np.random.default_rng(5)
    shares = LinkShares(3)
    assert len(feed(shares, [rng.uniform(1e9, 5e9, 3) for _ in range(4)]).port) == 0
    feed(shares, [rng.uniform(1e9, 5e9, 3) for _ in range(3 * WINDOW)])
    assert len(shares._sweeps) == WINDOW


def test_only_sweeps_with_the_same_jobs_on_the_link_count():
    rng = np.random.default_rng(6)
    shares = LinkShares(3)
    # before: job c did not run and link 1 carried b alone, at another share
    for _ in range(8):
        inj = rng.uniform(1e9, 5e9, 3)
        shares.add(IDS, inj, np.array([0.0, 0.9 * inj[1], 0.0]), INC_PORT[2:3], INC_JOB[2:3])
    result = feed(shares, [rng.uniform(1e9, 5e9, 3) for _ in range(6)])
    got = found(result)
    assert got[(1, 1)] == pytest.approx(0.1, abs=1e-6)
    assert got[(1, 2)] == pytest.approx(0.75, abs=1e-6)


def test_a_counter_the_jobs_do_not_explain_is_not_used():
    rng = np.random.default_rng(7)
    shares = LinkShares(3)
    for _ in range(10):
        inj = rng.uniform(1e9, 5e9, 3)
        noisy = links(inj) * rng.uniform(0.5, 1.5, 3)  # half of the counter is noise
        result = shares.add(IDS, inj, noisy, INC_PORT, INC_JOB)
    assert len(result.port) == 0


def test_a_sweep_the_learnt_shares_do_not_explain_drops_that_link():
    rng = np.random.default_rng(8)
    shares = LinkShares(3)
    feed(shares, [rng.uniform(1e9, 5e9, 3) for _ in range(8)])
    inj = rng.uniform(1e9, 5e9, 3)
    now = links(inj)
    now[0] += 0.4 * inj[0]  # job a's traffic changed shape: more of it on link 0
    got = found(shares.add(IDS, inj, now, INC_PORT, INC_JOB))
    assert (0, 0) not in got and (0, 1) not in got
    assert got[(1, 2)] == pytest.approx(0.75, abs=1e-6)  # link 1 is as it was
