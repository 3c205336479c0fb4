"""Attribution against the traffic model's ground truth, on real labs.

Jobs share leaf switches (and, on the 3-level lab, spines) with different patterns, so the
split of shared uplinks is really estimated.  Counters are read through PMA MADs
(perfquery backend, in this process), rates come from two sweeps around one model tick.
The labs and the comparison are those of ``python -m bench.attribution.eval``
(:mod:`bench.attribution.labs`; two of its mixes).
"""

from __future__ import annotations

import pytest

from bench.attribution import labs
from tests.integration.labcheck import QUIET

MIXES = {m.name: m for m in labs.MIXES}


@pytest.mark.parametrize("name", ["two-slim", "three-full"])
def test_attribution_follows_the_ground_truth(make_lab, tmp_path, name):
    mix = MIXES[name]
    path = tmp_path / "jobs.yaml"
    path.write_text(mix.jobs)
    lab = make_lab(mix.xgft, jobs=path, opensm_options=QUIET)
    err = labs.evaluate(lab)
    print(
        f"\n{mix.xgft}: mean relative error per job and level: "
        + ", ".join(f"{m} {err[m]:.1%}" for m in labs.METHODS)
    )
    # a declared pattern is the traffic the lab makes: exact either way
    assert err["routes+pattern"] <= 0.01
    assert err["subtree+pattern"] <= 0.01
    # without one, the routes beat the subtree split, which beats the equal split
    assert err["routes"] < err["subtree"] < err["equal"]
    if mix.tree.endswith("full"):  # one destination per downlink: the routes pin it
        assert err["routes"] <= 0.05
    assert max(err["residual"].values()) < 0.02
    assert 0.0 <= err["measured"] <= 1.0


def test_jobs_whose_traffic_moves_are_told_apart_on_a_slimmed_tree(make_lab, tmp_path):
    """Jobs that communicate in phases of seconds: over a dozen sweeps the routes fit
    learns each job's share of the down links several jobs' destinations share."""
    mix = MIXES["two-slim"]
    path = tmp_path / "jobs.yaml"
    path.write_text(labs.phased(mix.jobs))
    lab = make_lab(mix.xgft, jobs=path, opensm_options=QUIET)
    err = labs.evaluate_phased(lab, 12)
    print(f"\n{mix.xgft}, phased: " + ", ".join(f"{k} {v:.1%}" for k, v in err.items()))
    assert err["routes"] <= 0.05
    assert err["routes"] < err["routes first"]
    assert err["routes"] < err["subtree"]
