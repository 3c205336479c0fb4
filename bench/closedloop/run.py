"""One run of the closed-loop benchmark: a fluid lab, a job mix, one QoS policy.

:func:`lab_up` brings a lab up with fluid contention (``ibqos.lab.manage.up``, the
supervisor ticking in real time).  :func:`run_policy` starts the agent on it when the
policy has one, samples the jobs' iterations from the lab's ``truth.json`` and the agent's
tuning state from its ``state.json``, scrapes the agent's metrics at the end and stops the
agent; the caller takes the lab down.  The agent's config, its start, its metrics and its
stop (by its pid) are :mod:`ibqos.lab.agentrun`'s, as for the lab tests and the demo.
:func:`alone_rates` measures each job of a mix with the fabric to itself, one job at a
time in one lab.  Used by :mod:`bench.closedloop.bench`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ibqos.fabric.topology import Topology
from ibqos.lab import manage
from ibqos.lab.agentrun import AgentRun, Sections, agent_config, read_state, write_jobs
from ibqos.lab.lab import Lab

#: no periodic OpenSM sweeps: only the agent's reloads move OpenSM
QUIET = {"sweep_interval": "0"}
#: seconds between two samples of the lab's truth and the agent's state
SAMPLE_S = 0.25


@dataclass(frozen=True)
class Policy:
    """A QoS policy of the benchmark.

    Attributes:
        name: its column name.
        agent: the agent's config, as sections to merge into the lab's ``ibqos.yaml``;
            None: no agent (OpenSM's defaults: every job on SL 0, one lane).
    """

    name: str
    agent: Mapping[str, Mapping[str, Any]] | None


@dataclass
class Point:
    """One sample of a run.

    Attributes:
        wall_s: seconds since the run's start (monotonic).
        model_s: the lab's model time (seconds).
        iterations: job -> iterations finished.
        tuning: the agent's tuning state (``state.json``'s ``tuning``), {} when none.
    """

    wall_s: float
    model_s: float
    iterations: dict[str, int]
    tuning: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    """What one run saw."""

    policy: str
    points: list[Point]
    start_model_s: float  # the agent's start (or the same moment without one)
    settled_model_s: float | None  # tuning settled (adaptive runs)
    metrics: dict[str, float]  # the agent's metrics at the end, by name
    tuning: dict[str, Any]  # the last tuning state
    log: str  # the agent's log

    def rates(self, since_s: float, until_s: float | None = None) -> dict[str, float]:
        """Each job's iterations per second of model time over [since_s, until_s]."""
        until = self.points[-1].model_s if until_s is None else until_s
        first = next(p for p in self.points if p.model_s >= since_s)
        last = [p for p in self.points if p.model_s <= until][-1]
        span = last.model_s - first.model_s
        return {
            j: (last.iterations[j] - first.iterations.get(j, 0)) / span
            for j in last.iterations
            if span > 0
        }


def _truth(lab: Lab) -> dict[str, Any]:
    try:
        return dict(json.loads(lab.paths.truth.read_text()))
    except (OSError, ValueError):
        return {}


def _point(lab: Lab, t0: float, state_dir: Path | None) -> Point | None:
    """A sample of *lab*'s truth (None before the lab wrote one), with the tuning state of
    the agent whose state is in *state_dir* (None: no agent)."""
    truth = _truth(lab)
    if not truth:
        return None
    its = {j: int(v.get("iterations", 0)) for j, v in truth["jobs"].items() if v.get("running")}
    tuning: dict[str, Any] = {}
    if state_dir is not None:
        tuning = read_state(state_dir).get("tuning") or {}
    return Point(time.monotonic() - t0, float(truth.get("time_s", 0.0)), its, tuning)


def lab_up(name: str, root: Path, topo: Topology, jobs: Sequence[Mapping[str, Any]]) -> Lab:
    """A fluid lab of *jobs* on the fabric *topo*, ticking every 0.1 s, reading OpenSM's
    tables back every 1 s."""
    root.mkdir(parents=True, exist_ok=True)
    jobs_file = root / f"{name}.jobs.yaml"
    write_jobs(jobs_file, jobs)
    return manage.up(
        name,
        topo,
        root=root,
        jobs=jobs_file,
        opensm_options=QUIET,
        tick_s=0.1,
        contention="fluid",
        readback_s=1.0,
        progress_window_s=5.0,
        timeout=120,
    )


def _config(lab: Lab, workdir: Path, sections: Sections) -> Path:
    """``workdir/ibqos.yaml``: the lab's config with the agent's state under
    ``workdir/state``, its metrics on any free port (no SL socket: agents of other runs
    may be up at once), and *sections* merged in last."""
    own: Sections = {
        "agent": {"state_dir": str(workdir / "state"), "job_poll_s": 0.2, "socket": ""},
        "metrics": {"listen": "127.0.0.1:0"},
    }
    return agent_config(lab.paths.config, workdir / "ibqos.yaml", own, sections)


def run_policy(
    lab: Lab,
    policy: Policy,
    workdir: Path,
    *,
    run_s: float,
    until_settled_s: float | None = None,
    after_s: float = 0.0,
    on_point: Callable[[Point], None] | None = None,
) -> Trace:
    """Run *policy* on the running *lab* and sample it.

    Args:
        lab: a lab brought up by :func:`lab_up` (fresh: OpenSM's defaults in force).
        policy: what to run.
        workdir: the agent's files (``ibqos.yaml``, ``state/``, ``agent.log``, which is
            empty without an agent).
        run_s: seconds of model time to run for (from the agent's start).
        until_settled_s: tuning runs: run until tuning settled, at most this many
            seconds, then *after_s* more; the run lasts at least *run_s* all the same.
        after_s: seconds to run on once tuning settled.
        on_point: called with every sample.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "agent.log"
    state_dir = None if policy.agent is None else workdir / "state"
    t0 = time.monotonic()
    points: list[Point] = []
    while not points:
        p = _point(lab, t0, None)
        if p is not None:
            points.append(p)
        else:
            time.sleep(0.1)
    start = points[0].model_s
    agent: AgentRun | None = None
    with ExitStack() as stack:  # stops the agent however the run ends
        if policy.agent is None:
            log_path.write_text("")
        else:
            config = _config(lab, workdir, policy.agent)
            agent = stack.enter_context(AgentRun.on(lab, config, log_path))
        settled: float | None = None
        # a tuning run ends *after_s* after it settled (at least *run_s* after its start)
        end = start + run_s if until_settled_s is None else math.inf
        while True:
            time.sleep(SAMPLE_S)
            if agent is not None and (code := agent.poll()) is not None:
                raise RuntimeError(f"the agent exited ({code}): {log_path}")
            p = _point(lab, t0, state_dir)
            if p is None:
                continue
            points.append(p)
            if on_point is not None:
                on_point(p)
            if until_settled_s is not None and settled is None:
                if p.tuning.get("state") == "settled":
                    settled = p.model_s
                    end = max(start + run_s, settled + after_s)
                elif p.model_s - start > until_settled_s:
                    end = max(start + run_s, p.model_s)  # it never settled: stop
                    until_settled_s = None
            if p.model_s >= end:
                break
        metrics: dict[str, float] = {}
        if agent is not None and agent.metrics_url() is not None:
            metrics = {n: v for (n, labels), v in agent.samples().items() if not labels}
    return Trace(
        policy.name,
        points,
        start,
        settled,
        metrics,
        points[-1].tuning,
        "" if agent is None else agent.log_text(),  # read once the agent has stopped
    )


def alone_rates(
    lab: Lab, jobs: Sequence[Mapping[str, Any]], *, warm_s: float = 1.0, measure_s: float = 4.0
) -> dict[str, float]:
    """Each job's iterations per second with the fabric to itself: the lab's job file
    holds one job at a time (OpenSM's defaults in force; alone, lanes do not matter).
    A job's first *warm_s* seconds are left out (it starts with its compute phase)."""
    out: dict[str, float] = {}
    for job in jobs:
        write_jobs(lab.paths.jobs, [job])
        jid = str(job["id"])
        t0 = time.monotonic()
        seen: Point | None = None
        first: Point | None = None
        while True:
            time.sleep(SAMPLE_S)
            p = _point(lab, t0, None)
            if p is None or set(p.iterations) != {jid}:
                continue
            if seen is None:
                seen = p
            if first is None and p.model_s - seen.model_s >= warm_s:
                first = p
            if first is not None and p.model_s - first.model_s >= measure_s:
                break
        assert first is not None
        out[jid] = (p.iterations[jid] - first.iterations[jid]) / (p.model_s - first.model_s)
    return out


def wait_running(lab: Lab, jobs: Sequence[str], warm_s: float, timeout_s: float = 60.0) -> None:
    """Wait until every job of *jobs* runs in the lab and *warm_s* seconds of lab time have
    passed since."""
    t0 = time.monotonic()
    since: float | None = None
    while True:
        p = _point(lab, t0, None)
        if p is not None and set(jobs) <= set(p.iterations):
            since = p.model_s if since is None else since
            if p.model_s - since >= warm_s:
                return
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"jobs {', '.join(jobs)} not running after {timeout_s:g} s")
        time.sleep(0.1)
