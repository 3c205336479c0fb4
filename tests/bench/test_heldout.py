"""bench.sim.heldout: its command line, one small mix end to end at a short N, and the
report's counts."""

from __future__ import annotations

import pytest

from bench.sim import heldout
from bench.sim.mixes import Mix
from ibqos.jobs.model import Job
from ibqos.sim import policies

LOOP = heldout.LOOP

#: two jobs across the single uplink of each of two leaves: they contend
SMALL = Mix(
    "small",
    "4:1",
    "2;4,2;1,1",
    "interleaved",
    "2 jobs",
    (
        Job("a", ("cn0001", "cn0002", "cn0005", "cn0006"), "all-to-all", 10e9, 0.6, 0.004),
        Job("b", ("cn0003", "cn0004", "cn0007", "cn0008"), "ring", 6e9, 0.4, 0.002),
    ),
    policies.DEFAULT_LANES,
)


def test_the_options_are_checked() -> None:
    args = heldout.parse([])
    assert (args.generated, args.jobs, args.search_jobs, args.short) == (100, 1, 3, 10)
    for bad in (["--generated", "-1"], ["--jobs", "0"], ["--short", "0"]):
        with pytest.raises(SystemExit):
            heldout.parse(bad)


def test_the_mixes_asked_for() -> None:
    names = [m.name for m in heldout.todo(heldout.parse(["--generated", "3", "--start", "2"]))]
    assert names[0] == "held-out" and any(n.startswith("apps ") for n in names)
    assert names[-3:] == [n for n in names if n.startswith("gen 43/")]
    assert names[-3].startswith("gen 43/2 ")
    only = heldout.todo(heldout.parse(["--generated", "2", "--no-named", "--seed", "9"]))
    assert [m.name.split()[1] for m in only] == ["9/0", "9/1"]
    assert [m.name for m in heldout.todo(heldout.parse(["--only", "held"]))] == ["held-out"]


def test_a_small_mix_under_every_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldout, "default_iterations", lambda jobs, sweep, cfg: 40)
    r = heldout.run_mix(SMALL, search_jobs=4, short=5)
    assert set(r.s) == set(heldout.POLICIES) and r.iterations == 40
    assert r.contended and r.searched
    # the optimum is the best setup known: never above a fixed policy at the same N
    assert all(r.s["optimal"] <= r.s[p] for p in heldout.FIXED)
    assert r.gains[r.best_base] == 0.0 and r.gains["optimal"] >= 0.0
    assert r.contention_ms["one-vl"] > 0
    unsearched = heldout.run_mix(SMALL, search_jobs=1, short=5)
    assert not unsearched.searched
    assert unsearched.s["optimal"] <= min(unsearched.s[p] for p in heldout.FIXED)


def _result(
    name: str, s: dict[str, float], gains: dict[str, float], searched: bool
) -> heldout.Result:
    full = {p: s.get(p, 1.2) for p in heldout.POLICIES}
    every = {p: gains.get(p, 0.0) for p in heldout.POLICIES}
    return heldout.Result(name, "", 10, full, dict.fromkeys(full, 1.0), searched, every, "", 1.0)


def test_the_summary_counts_ibqos_against_the_baselines_and_the_optimum() -> None:
    rs = [
        # at the best baseline, 3 points from the optimum's gain
        _result("gen 1/0", {"one-vl": 1.1, LOOP: 1.1}, {"ibqos": 0.0, "optimal": 0.03}, True),
        # above it, far from the optimum
        _result("gen 1/1", {"equal": 1.1, LOOP: 1.15}, {"ibqos": -0.5, "optimal": 0.5}, True),
        # far from a bound only: not counted against the optimum
        _result("apps x", {"bandwidth": 1.1, LOOP: 1.05}, {"ibqos": 0.5, "optimal": 0.9}, False),
    ]
    assert [r.at_or_below for r in rs] == [True, False, True]
    assert [r.near_optimum for r in rs[:2]] == [True, False]
    text = "\n".join(heldout.report(rs))
    assert "| all mixes | 3 | 2/3 (67%) | 1/2 (50%) |" in text
    assert "| named (held-out, apps) | 1 | 1/1 (100%) | - |" in text
    assert "≥ 1.200" in text  # the unsearched optimum is marked a bound
