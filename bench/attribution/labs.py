"""The attribution evaluation's labs and its comparison against their ground truth.

Each :class:`Mix` is a lab whose jobs share leaf switches and spines, on 2- and 3-level
trees, slimmed and full.  :func:`evaluate` reads the lab's counters through PMA MADs (the
perfquery backend) in two sweeps around one model tick, takes the jobs' patterns away and
gives each method's mean relative error per job and level against the traffic model's
ground truth; :func:`evaluate_phased` does the same over many sweeps of jobs whose traffic
moves (:func:`phased`).  :mod:`bench.attribution.eval` runs them all;
``tests/integration/test_attribution_lab.py`` two of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ibqos.attribute.attribution import Attribution, Attributor
from ibqos.attribute.jobmap import MappedJob, map_jobs
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.rates import RateTracker
from ibqos.fabric.model import Fabric
from ibqos.fabric.routes import parse_lft_dump
from ibqos.fabric.targets import Target
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.fabric import fabric_from_lab
from ibqos.lab.lab import Lab

#: OpenSM options for a quiet lab (no periodic sweeps between the two reads)
QUIET = {"sweep_interval": "0"}

J2 = """jobs:
  - {id: a2a, nodes: "cn[0001-0003,0009-0011]", pattern: all-to-all,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0004-0006,0012-0014,0017-0018]", pattern: ring,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: halo, nodes: "cn[0007-0008,0015-0016,0019-0022]", pattern: halo, halo_dims: [2, 4],
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
  - {id: pairs, nodes: "cn[0023-0030]", pattern: random-pairs,
     rate_bytes_per_s: 4.0e9, duty: 1.0, period_s: 0.1}
"""

# interleaved: every leaf holds hosts of three or four jobs; a matrix job (a pipeline with
# a heavy first stage) among them
J2_MIXED = """jobs:
  - {id: matrix, nodes: "cn[0001,0005,0009,0013,0017,0021]", pattern: matrix,
     matrix: [[0, 4, 1, 0, 0, 1], [1, 0, 2, 0, 0, 0], [0, 1, 0, 2, 0, 0],
              [0, 0, 1, 0, 2, 0], [0, 0, 0, 1, 0, 2], [2, 0, 0, 0, 1, 0]],
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0002-0004,0010-0012,0025-0026]", pattern: ring,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: pairs, nodes: "cn[0006-0008,0014-0016,0022-0023]", pattern: random-pairs,
     rate_bytes_per_s: 2.5e9, duty: 1.0, period_s: 0.1}
  - {id: a2a, nodes: "cn[0018-0020,0027-0030]", pattern: all-to-all,
     rate_bytes_per_s: 1.5e9, duty: 1.0, period_s: 0.1}
"""

J3 = """jobs:
  - {id: big, nodes: "cn[0001-0012,0033-0044,0065-0070]", pattern: all-to-all,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0013-0020,0045-0052]", pattern: ring,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: halo, nodes: "cn[0021-0032,0053-0056]", pattern: halo, halo_dims: [4, 4],
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
  - {id: small, nodes: "cn[0071-0074,0097-0100]", pattern: all-to-all,
     rate_bytes_per_s: 5.0e9, duty: 1.0, period_s: 0.1}
"""

J3_MIXED = """jobs:
  - {id: halo, nodes: "cn[0001-0004,0017-0020,0033-0036,0049-0052]", pattern: halo,
     halo_dims: [4, 4], rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: ring, nodes: "cn[0005-0008,0021-0024,0053-0056]", pattern: ring,
     rate_bytes_per_s: 3.0e9, duty: 1.0, period_s: 0.1}
  - {id: pairs, nodes: "cn[0009-0012,0037-0040,0057-0060]", pattern: random-pairs,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
  - {id: a2a, nodes: "cn[0013-0016,0025-0028,0041-0044,0061-0064]", pattern: all-to-all,
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
"""


@dataclass(frozen=True)
class Mix:
    """One lab: a name, its XGFT, its jobs file and what kind of tree it is."""

    name: str
    xgft: str
    jobs: str
    tree: str


MIXES = (
    Mix("two-slim", "2;8,4;1,2", J2, "2 levels, 4:1 slimmed"),
    Mix("two-half", "2;8,4;1,4", J2_MIXED, "2 levels, 2:1 slimmed"),
    Mix("two-full", "2;8,4;1,8", J2, "2 levels, full"),
    Mix("two-full-mixed", "2;8,4;1,8", J2_MIXED, "2 levels, full"),
    Mix("three-slim", "3;8,4,4;1,2,2", J3, "3 levels, 4:1 and 2:1 slimmed"),
    Mix("three-full", "3;8,4,4;1,8,4", J3, "3 levels, full"),
    Mix("three-mixed", "3;4,4,4;1,4,4", J3_MIXED, "3 levels, full"),
    Mix("three-mixed-slim", "3;4,4,4;1,2,2", J3_MIXED, "3 levels, 2:1 slimmed"),
)

METHODS = ("routes", "subtree", "equal", "routes+pattern", "subtree+pattern")
#: communication periods of the phased jobs (duty 0.5), seconds, in job order
PERIODS = (1.7, 2.9, 4.3, 6.1)
#: the last sweeps of a phased run whose errors are averaged
LAST = 4


def read_rates(lab: Lab, fabric: Fabric, interval_s: float) -> pd.DataFrame:
    """Rates from two sweeps around one model tick of *interval_s* seconds."""
    targets = fabric.targets()
    tracker = RateTracker()
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, xmit_wait=False) as backend:
        tracker.update(backend.sweep(targets))
        return tick_and_sweep(lab, backend, tracker, targets, interval_s)


def tick_and_sweep(
    lab: Lab,
    backend: PerfqueryBackend,
    tracker: RateTracker,
    targets: list[Target],
    interval_s: float,
) -> pd.DataFrame:
    """One model tick of *interval_s* seconds, then a sweep: the rates of that tick."""
    t0 = time.monotonic()
    lab.tick(interval_s)
    # a rate above a link's capacity is dropped as implausible: the wall-clock interval
    # must not be shorter than the model's
    time.sleep(max(0.0, interval_s - (time.monotonic() - t0)))
    rates = tracker.update(backend.sweep(targets))
    # the model moved interval_s seconds of traffic between the sweeps
    for col in ("xmit_bytes_per_s", "rcv_bytes_per_s"):
        rates[col] = rates[col] * rates["interval_s"] / interval_s
    return rates


def equal_split(fabric: Fabric, rates: pd.DataFrame, mapped: Sequence[MappedJob]) -> Attribution:
    """The naive split: each subtree's uplink total shared equally among its jobs."""
    at = Attributor(fabric)
    xmit = dict(
        zip(
            zip(rates["node_guid"].tolist(), rates["port"].tolist(), strict=True),
            rates["xmit_bytes_per_s"].tolist(),
            strict=True,
        )
    )
    out = np.zeros((len(mapped), len(at.levels) + 1))
    for j, mj in enumerate(mapped):
        out[j, 0] = sum(xmit[k] for k in mj.ports)
    for lvl in at.levels:
        keys, subs = at.up_ports[lvl]
        total: dict[int, float] = {}
        for k, s in zip(keys, subs.tolist(), strict=True):
            total[s] = total.get(s, 0.0) + xmit[k]
        members: dict[int, set[str]] = {}
        for mj in mapped:
            for k in mj.ports:
                members.setdefault(at.subtree_of[lvl][k[0]], set()).add(mj.id)
        for j, mj in enumerate(mapped):
            subs_j = {at.subtree_of[lvl][k[0]] for k in mj.ports}
            out[j, lvl] = sum(total.get(s, 0.0) / len(members[s]) for s in subs_j)
    ids = tuple(mj.id for mj in mapped)
    return Attribution(ids, (0, *at.levels), out, np.zeros_like(out))


def evaluate(lab: Lab, interval_s: float = 1.0) -> dict[str, float | dict[int, float]]:
    """Mean relative error per job and level (l >= 1) of every method on *lab*, and the
    routes fit's residual per level and mean measured share."""
    fabric = fabric_from_lab(lab)
    rates = read_rates(lab, fabric, interval_s)
    truth = lab.truth()["jobs"]
    assert lab.model is not None  # a running lab has its traffic model
    mapped, warnings = map_jobs([load.job for load in lab.model.jobs.values()], fabric)
    if warnings:
        raise SystemExit(f"{lab.paths.name}: {warnings[0]}")
    blind = [MappedJob(replace(mj.job, pattern=""), mj.ports, mj.hosts) for mj in mapped]
    lfts = parse_lft_dump(lab.paths.opensm.lfts_dump.read_text())
    results = {
        "routes": Attributor(fabric, lfts).attribute(rates, blind),
        "subtree": Attributor(fabric).attribute(rates, blind),
        "equal": equal_split(fabric, rates, blind),
        "routes+pattern": Attributor(fabric, lfts).attribute(rates, mapped),
        "subtree+pattern": Attributor(fabric).attribute(rates, mapped),
    }
    out: dict[str, float | dict[int, float]] = {}
    for name, result in results.items():
        errs = []
        for mj in mapped:
            for lvl, true in enumerate(truth[mj.id]["level_bytes_per_s"]):
                if lvl >= 1 and true > 0:
                    errs.append(abs(result.jobs[mj.id].bytes_per_s[lvl] - true) / true)
        out[name] = float(np.mean(errs))
    out["residual"] = results["routes"].residual
    out["measured"] = float(np.mean(results["routes"].measured_share))
    return out


def phased(jobs_text: str) -> str:
    """*jobs_text* with every job communicating half of each of its ``PERIODS``."""
    out = jobs_text
    for period in PERIODS:
        out = out.replace("duty: 1.0, period_s: 0.1", f"duty: 0.5, period_s: {period}", 1)
    return out


def errors_of(result: Attribution, truth: dict[str, Any], mapped: Sequence[MappedJob]) -> float:
    """Mean relative error per job and level >= 1 against *truth* (levels with traffic)."""
    errs = []
    for mj in mapped:
        for lvl, true in enumerate(truth[mj.id]["level_bytes_per_s"]):
            if lvl >= 1 and true > 0:
                errs.append(abs(result.jobs[mj.id].bytes_per_s[lvl] - true) / true)
    return float(np.mean(errs)) if errs else float("nan")


def evaluate_phased(lab: Lab, sweeps: int, interval_s: float = 1.0) -> dict[str, float]:
    """The routes fit and the subtree split over *sweeps* sweeps of a phased lab: mean
    error of the last ``LAST`` sweeps, and the routes fit's on the first."""
    fabric = fabric_from_lab(lab)
    targets = fabric.targets()
    lfts = parse_lft_dump(lab.paths.opensm.lfts_dump.read_text())
    assert lab.model is not None  # a running lab has its traffic model
    mapped, _ = map_jobs([load.job for load in lab.model.jobs.values()], fabric)
    blind = [MappedJob(replace(mj.job, pattern=""), mj.ports, mj.hosts) for mj in mapped]
    routes, subtree = Attributor(fabric, lfts), Attributor(fabric)
    tracker = RateTracker()
    errs: dict[str, list[float]] = {"routes": [], "subtree": []}
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, xmit_wait=False) as backend:
        tracker.update(backend.sweep(targets))
        for _ in range(sweeps):
            rates = tick_and_sweep(lab, backend, tracker, targets, interval_s)
            truth = lab.truth()["jobs"]
            errs["routes"].append(errors_of(routes.attribute(rates, blind), truth, mapped))
            errs["subtree"].append(errors_of(subtree.attribute(rates, blind), truth, mapped))
    return {
        "routes first": errs["routes"][0],
        "routes": float(np.nanmean(errs["routes"][-LAST:])),
        "subtree": float(np.nanmean(errs["subtree"][-LAST:])),
    }


def start(mix: Mix, root: Path, jobs_text: str, tag: str) -> Lab:
    """A running lab of *mix* with the jobs of *jobs_text*."""
    jobs = root / f"{mix.name}{tag}.yaml"
    jobs.write_text(jobs_text)
    topo = build_xgft(parse_xgft(mix.xgft))
    lab = Lab.create(mix.name + tag, topo, root=root / "labs", jobs=jobs, opensm_options=QUIET)
    try:
        lab.start()
    except BaseException:
        lab.destroy()
        raise
    return lab


def run_mix(mix: Mix, root: Path, interval_s: float) -> dict[str, float | dict[int, float]]:
    lab = start(mix, root, mix.jobs, "")
    try:
        return evaluate(lab, interval_s)
    finally:
        lab.destroy()


def run_phased(mix: Mix, root: Path, sweeps: int) -> dict[str, float]:
    lab = start(mix, root, phased(mix.jobs), "-phased")
    try:
        return evaluate_phased(lab, sweeps)
    finally:
        lab.destroy()
