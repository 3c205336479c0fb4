"""Attribution against the traffic model's ground truth, on real labs.

Jobs share leaf switches (and, on the 3-level lab, spines) with different patterns, so the
split of shared uplinks is really estimated.  Counters are read through PMA MADs
(perfquery backend, in this process), rates come from two sweeps around one model tick.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from labcheck import QUIET

from ibqos.attribute.attribution import Attributor
from ibqos.attribute.jobmap import MappedJob, map_jobs
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.rates import RateTracker
from ibqos.lab.fabric import fabric_from_lab

JOBS_2 = """jobs:
  - {id: a2a, nodes: "cn[0001-0003,0009-0011]", pattern: all-to-all,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0004-0006,0012-0014,0017-0018]", pattern: ring,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: halo, nodes: "cn[0007-0008,0015-0016,0019-0022]", pattern: halo, halo_dims: [2, 4],
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
  - {id: pairs, nodes: "cn[0023-0030]", pattern: random-pairs,
     rate_bytes_per_s: 4.0e9, duty: 1.0, period_s: 0.1}
"""

JOBS_3 = """jobs:
  - {id: big, nodes: "cn[0001-0012,0033-0044,0065-0070]", pattern: all-to-all,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0013-0020,0045-0052]", pattern: ring,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: halo, nodes: "cn[0021-0032,0053-0056]", pattern: halo, halo_dims: [4, 4],
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
  - {id: small, nodes: "cn[0071-0074,0097-0100]", pattern: all-to-all,
     rate_bytes_per_s: 5.0e9, duty: 1.0, period_s: 0.1}
"""


def errors(lab, dt=1.0):
    """Relative absolute error per (job, level) of the attribution and of a uniform split."""
    fabric = fabric_from_lab(lab)
    targets = fabric.targets()
    tracker = RateTracker()
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, xmit_wait=False) as backend:
        tracker.update(backend.sweep(targets))
        t0 = time.monotonic()
        lab.tick(dt)
        # a rate above the link's capacity is dropped as implausible: the wall-clock
        # interval must not be shorter than the model's, or the rates would exceed it
        time.sleep(max(0.0, dt - (time.monotonic() - t0)))
        rates = tracker.update(backend.sweep(targets))
    # the model moved dt seconds of traffic between the sweeps: bytes / dt, not / wall time
    rates["xmit_bytes_per_s"] = rates["xmit_bytes_per_s"] * rates["interval_s"] / dt
    truth = lab.truth()["jobs"]
    mapped, warnings = map_jobs([load.job for load in lab.model.jobs.values()], fabric)
    assert not warnings
    result = Attributor(fabric).attribute(rates, mapped)
    # the same without profiles: jobs that declare no pattern get the gravity prior
    blind = [MappedJob(replace(mj.job, pattern=""), mj.ports, mj.hosts) for mj in mapped]
    gravity = Attributor(fabric).attribute(rates, blind)
    uniform = uniform_split(fabric, rates, mapped)
    errs: dict[str, list[float]] = {"profile": [], "gravity": [], "uniform": []}
    for mj in mapped:
        want = truth[mj.id]["level_bytes_per_s"]
        for lvl, true in enumerate(want):
            if true <= 0:
                continue
            errs["profile"].append(abs(result.jobs[mj.id].bytes_per_s[lvl] - true) / true)
            errs["gravity"].append(abs(gravity.jobs[mj.id].bytes_per_s[lvl] - true) / true)
            errs["uniform"].append(abs(uniform[mj.id][lvl] - true) / true)
    return {k: float(np.mean(v)) for k, v in errs.items()}, result


def uniform_split(fabric, rates, mapped):
    """The naive split: each subtree's uplink total shared equally among its jobs."""
    at = Attributor(fabric)
    xmit = dict(
        zip(
            zip(rates["node_guid"].tolist(), rates["port"].tolist(), strict=True),
            rates["xmit_bytes_per_s"].tolist(),
            strict=True,
        )
    )
    out = {mj.id: {0: sum(xmit[k] for k in mj.ports)} for mj in mapped}
    for lvl in at.levels:
        keys, subs = at.up_ports[lvl]
        total: dict[int, float] = {}
        for k, s in zip(keys, subs.tolist(), strict=True):
            total[s] = total.get(s, 0.0) + xmit[k]
        members: dict[int, set[str]] = {}
        for mj in mapped:
            for k in mj.ports:
                members.setdefault(at.subtree_of[lvl][k[0]], set()).add(mj.id)
        for mj in mapped:
            subs_j = {at.subtree_of[lvl][k[0]] for k in mj.ports}
            out[mj.id][lvl] = sum(total.get(s, 0.0) / len(members[s]) for s in subs_j)
    return out


@pytest.mark.parametrize(("xgft", "jobs_text"), [("2;8,4;1,2", JOBS_2), ("3;8,4,4;1,2,2", JOBS_3)])
def test_attribution_follows_the_ground_truth(make_lab, tmp_path, xgft, jobs_text):
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs_text)
    lab = make_lab(xgft, jobs=path, opensm_options=QUIET)
    err, result = errors(lab)
    print(
        f"\n{xgft}: mean relative error per job and level: with pattern profiles "
        f"{err['profile']:.1%}, gravity prior only {err['gravity']:.1%}, "
        f"uniform split {err['uniform']:.1%}"
    )
    assert err["profile"] <= 0.05
    assert err["gravity"] < err["uniform"]
    for jt in result.jobs.values():
        assert jt.measured[0] == 1.0
        assert 0.0 <= jt.measured_share <= 1.0
