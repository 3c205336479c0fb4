"""Benchmark the contention simulator: simulated time per wall-clock second, and a what-if.

Usage: python -m bench.sim.bench [--rounds N] [--no-packet] [--no-cli] [--json FILE]

**64 nodes** (``2;16,4;1,8``, 4 leaves of 16 hosts, 2:1): one mix of 4 jobs (a heavy
all-to-all, two moderate, one light; fragmented over the leaves:
:mod:`bench.sim.benchmixes` holds the mixes), 10 iterations, under the one-vl and the
ibqos setups.  The packet model simulates every
2 KiB packet, so the mix is sized for it: iterations of 40-100 us (a few hundred KB per
host per iteration).  Both models run exactly that mix; the fluid model runs it without
switch buffers and with the 8 packets per lane per input that ``ibqos simulate`` gives it
at this size (:func:`ibqos.sim.fluid.auto_buffers`), and also with every period 100 times
longer (the same phases at the millisecond scale of the evaluation), because its cost
grows with the number of phase changes, not with bytes.
Reported: simulated seconds per wall second (the sharing run alone), events, and the
packet model's packet hops (a packet crossing a link) per wall second.

**2,048 nodes** (``3;16,16,8;1,8,8``: 128 leaves of 16 hosts, 8 uplinks each, 2:1 at the
leaves), 20 jobs on 90 % of the hosts, fluid model, 10 iterations.  Job sizes 16-384
hosts, two heavy all-to-all jobs, the others halo, ring and random pairs; 14 placed
contiguously, 6 scattered over the fabric; periods of 2-20 ms.  Timed stages:

- ``network``: the fabric with D-mod-K routes (:func:`ibqos.sim.network.xgft_network`),
  built once per fabric;
- ``route``: the mix's flows routed (:func:`ibqos.sim.workload.prepare`);
- ``alone``: T_alone of every job (20 fluid runs, one job each);
- ``sharing run``: one run of the whole mix under a setup (one-vl, equal, ibqos's);
- ``ibqos build``: :func:`ibqos.sim.policies.build` for ``ibqos-fixed`` (the mix on one
  VL, then a decision cycle); ``ibqos`` below is that setup, the law without tuning;
- **what-if**: what ``ibqos simulate --policy one-vl|ibqos`` computes once the fabric is
  built, in its order, timed as a whole: route, the sharing run on one VL, for ibqos the
  plan and the sharing run under it, then T_alone (no switch buffers: the senders are per
  job at this size, and :func:`ibqos.sim.fluid.auto_buffers` gives them none).
- ``cli``: ``ibqos simulate --xgft ... --jobs FILE --policy P`` end to end in a new
  process (Python start, imports, the fabric, the job file), wall clock.

The stages above are each timed from scratch (:func:`cold`); in a what-if the runs after
the first reuse the mix's routed and grouped senders, as ``ibqos simulate`` does, so a
what-if takes less than the sum of its stages.

**512 nodes** (``3;16,4,8;1,8,8``): the 2,048-node mix a quarter of the size (20 jobs on
476 hosts), the largest the fluid model runs per host by default, and so with the 8
packets of switch buffer per lane it then gets: the what-ifs with those buffers and
without.

Each stage is timed ``--rounds`` times; the tables give the median and the minimum.
Prints the machine and Markdown tables with the 10 s target beside the what-if; progress
goes to stderr.  docs/simulate-benchmark.md holds one run.  Wall-clock times on a shared
2-core machine: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench.machine import machine
from bench.report import say, table
from bench.sim.benchmixes import (
    XGFT_64,
    XGFT_512,
    XGFT_2048,
    compute_hosts,
    jobs_64,
    jobs_2048,
)
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.jobfile import dump_jobs
from ibqos.jobs.model import Job
from ibqos.sim import policies
from ibqos.sim.evaluate import alone
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.packet import PACKET_BUFFER
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import auto_buffers, forget_mix
from ibqos.sim.workload import RunResult, SimJob, prepare

ITERATIONS = 10
TARGET_S = 10.0  # the target for a 2,048-node what-if with 20 jobs, 10 iterations
#: fluid at the millisecond scale: every period this many times longer
STRETCH = 100

T = TypeVar("T")


def timed(fn: Callable[[], T], rounds: int) -> tuple[T, list[float]]:
    """fn's result and its wall time in every round."""
    times = []
    out: T | None = None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    assert out is not None
    return out, times


def cold(fn: Callable[[], T]) -> Callable[[], T]:
    """*fn* from scratch: without the senders a run before it built for the same mix."""

    def run() -> T:
        forget_mix()
        return fn()

    return run


def what_if(
    net: Network, jobs: list[Job], policy: str, buffers: int | None = None
) -> dict[str, float]:
    """What ``ibqos simulate --policy one-vl|ibqos`` computes once it has the fabric, in its
    order: route, the mix on one VL (E's baseline and what ibqos plans from), ibqos's
    plan and the mix under it, then T_alone (runs after the first reuse the mix's
    senders).  Returns each job's contention (s) under *policy*."""
    sim_jobs = prepare(net, jobs)
    bp = auto_buffers(sim_jobs, given=buffers)  # as `ibqos simulate --buffers`
    base = policies.one_vl(sim_jobs, policies.DEFAULT_LANES)
    run = simulate_fluid(net, sim_jobs, base, ITERATIONS, buffer_packets=bp)
    if policy == "ibqos":
        arb = policies.build("ibqos-fixed", net, sim_jobs, ITERATIONS, seen=run, buffer_packets=bp)
        run = simulate_fluid(net, sim_jobs, arb, ITERATIONS, buffer_packets=bp)
    t_alone = alone("fluid", net, sim_jobs, base, ITERATIONS, buffer_packets=bp)
    return {j.id: run.jobs[j.id].t_s - t_alone[j.id] for j in sim_jobs}


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f}"


def run_model(
    model: str, net: Network, jobs: list[SimJob], arb: Arbitration, buffers: int
) -> RunResult:
    if model == "fluid":
        return simulate_fluid(net, jobs, arb, ITERATIONS, buffer_packets=buffers)
    from ibqos.sim.packet import simulate_packets

    return simulate_packets(net, jobs, arb, ITERATIONS, buffer_packets=buffers)


def bench_64(rounds: int, packet: bool) -> tuple[list[str], list[dict[str, object]]]:
    net = xgft_network(parse_xgft(XGFT_64))
    rows, doc = [], []
    # the fluid model without buffers, and with those `ibqos simulate` gives it here
    auto = auto_buffers(prepare(net, jobs_64(net)))
    cases = [("fluid", 1.0, 0), ("fluid", 1.0, auto), ("fluid", float(STRETCH), 0)]
    cases += [("fluid", float(STRETCH), auto)]
    if packet:
        cases.insert(2, ("packet", 1.0, PACKET_BUFFER))
    for model, stretch, buffers in cases:
        sim_jobs = prepare(net, jobs_64(net, stretch))
        for pol in ("one-vl", "ibqos"):
            plan_bp = buffers if model == "fluid" else auto  # ibqos plans by the fluid model
            name = "ibqos-fixed" if pol == "ibqos" else pol  # the law, not the closed loop
            arb = policies.build(name, net, sim_jobs, ITERATIONS, buffer_packets=plan_bp)
            n = rounds if model == "fluid" else max(1, min(rounds, 2))
            res, times = timed(partial(run_model, model, net, sim_jobs, arb, buffers), n)
            best = min(times)
            scale = "us" if stretch == 1.0 else "ms"
            packets = ""
            if model == "packet":
                hops = float(res.link_bytes.sum()) / arb.mtu  # packets x links crossed
                packets = f"{hops / best:,.0f}"
            rows.append(
                [
                    model,
                    str(buffers),
                    f"{scale} ({stretch:g}x)",
                    pol,
                    f"{res.sim_time_s * 1e3:.3f}",
                    f"{res.events:,}",
                    med(times),
                    f"{res.sim_time_s / statistics.median(times):.4g}",
                    f"{res.sim_time_s / best:.4g}",
                    packets or "-",
                ]
            )
            doc.append(
                {
                    "model": model,
                    "buffers": buffers,
                    "stretch": stretch,
                    "policy": pol,
                    "sim_s": res.sim_time_s,
                    "events": res.events,
                    "wall_s": times,
                }
            )
            say(f"64 nodes {model} x{stretch:g} buffers {buffers} {pol}: {med(times)} s")
    header = [
        "model",
        "buffers (packets per lane per input)",
        "time scale",
        "setup",
        "simulated ms",
        "events",
        "wall s (median)",
        "sim s / wall s (median)",
        "(best)",
        "packet hops / wall s (best)",
    ]
    return table(header, rows, "lrllr"), doc


def cli_time(xgft: str, jobs: list[Job], policy: str, rounds: int) -> list[float]:
    exe = Path(sys.executable).with_name("ibqos")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.yaml"
        path.write_text(dump_jobs(jobs))
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            subprocess.run(
                [
                    str(exe),
                    "simulate",
                    "--xgft",
                    xgft,
                    "--jobs",
                    str(path),
                    "--policy",
                    # the law's what-if: `--policy ibqos` tunes in a closed loop, at its own N
                    "ibqos-fixed" if policy == "ibqos" else policy,
                    "--format",
                    "json",
                ],
                check=True,
                capture_output=True,
                env={**os.environ, "IBQOS_CONFIG": str(Path(tmp) / "none.yaml")},
            )
            times.append(time.perf_counter() - start)
    return times


def bench_2048(rounds: int, cli: bool) -> tuple[list[str], dict[str, object]]:
    stages: dict[str, list[float]] = {}
    net, stages["network"] = timed(lambda: xgft_network(parse_xgft(XGFT_2048)), 1)
    jobs = jobs_2048(net)
    flows = 0
    sim_jobs, stages["route"] = timed(lambda: prepare(net, jobs), rounds)
    flows = sum(len(j.flows.rate) for j in sim_jobs)
    say(
        f"2048 nodes: network {stages['network'][0]:.2f} s, {flows:,} flows routed"
        f" in {med(stages['route'])} s"
    )
    base = policies.one_vl(sim_jobs, policies.DEFAULT_LANES)
    bp = auto_buffers(sim_jobs)  # as in a what-if: none, the senders being per job
    t_alone, stages["alone"] = timed(
        cold(lambda: alone("fluid", net, sim_jobs, base, ITERATIONS, buffer_packets=bp)), rounds
    )
    say(f"2048 nodes: alone {med(stages['alone'])} s")
    ibqos_arb, stages["ibqos build"] = timed(
        cold(lambda: policies.build("ibqos-fixed", net, sim_jobs, ITERATIONS, buffer_packets=bp)),
        rounds,
    )
    setups = {
        "one-vl": base,
        "equal": policies.build("equal", net, sim_jobs, ITERATIONS),
        "ibqos": ibqos_arb,
    }
    results: dict[str, RunResult] = {}
    for name, arb in setups.items():
        results[name], stages[f"sharing run {name}"] = timed(
            cold(partial(simulate_fluid, net, sim_jobs, arb, ITERATIONS, buffer_packets=bp)),
            rounds,
        )
        say(f"2048 nodes: sharing run {name} {med(stages[f'sharing run {name}'])} s")
    for pol in ("one-vl", "ibqos"):
        got, stages[f"what-if {pol}"] = timed(partial(what_if, net, jobs, pol), rounds)
        staged = results[pol]  # a what-if's answer is the stages' (senders reused or not)
        if got != {j.id: staged.jobs[j.id].t_s - t_alone[j.id] for j in sim_jobs}:
            raise SystemExit(f"what-if {pol}: not the contention its stages give")
        say(f"2048 nodes: what-if {pol} {med(stages[f'what-if {pol}'])} s")
    if cli:
        for pol in ("one-vl", "ibqos"):
            stages[f"cli {pol}"] = cli_time(XGFT_2048, jobs, pol, max(1, min(rounds, 2)))
            say(f"2048 nodes: cli {pol} {med(stages[f'cli {pol}'])} s")

    def m(key: str) -> float:
        return statistics.median(stages[key])

    def b(key: str) -> float:
        return min(stages[key])

    steps = {
        "one-vl": "route + sharing run one-vl + alone",
        "ibqos": "route + sharing run one-vl + plan + sharing run ibqos + alone",
    }
    rows = []
    for key in stages:
        sim, ev = "", ""
        run = key.removeprefix("sharing run ")
        if run in results:
            sim = f"{results[run].sim_time_s:.3f}"
            ev = f"{results[run].events:,}"
        rows.append([key, f"{m(key):.3f}", f"{b(key):.3f}", sim, ev])
    out = table(["stage", "wall s (median)", "best", "simulated s", "events"], rows, "lr")
    rows = []
    for pol, done in steps.items():
        for key, what in (
            (f"what-if {pol}", f"`--policy {pol}`: {done}"),
            (f"cli {pol}", f"`ibqos simulate --policy {pol}` (new process, builds the fabric)"),
        ):
            if key in stages:
                verdict = "met" if m(key) < TARGET_S else "missed"
                rows.append([what, f"{m(key):.2f}", f"{b(key):.2f}", f"{TARGET_S:.0f}", verdict])
    what_if_head = "what-if (fluid, 2,048 nodes, 20 jobs, 10 iterations)"
    columns = [what_if_head, "wall s (median)", "best", "target", None]
    out += ["", *table(columns, rows, "lrrrl")]
    sizes = sorted((len(j.nodes) for j in jobs), reverse=True)
    out += [
        "",
        f"Mix: {len(jobs)} jobs on {sum(sizes):,} of {len(compute_hosts(net)):,} hosts"
        f" (sizes {', '.join(map(str, sizes))}); {flows:,} flows; {net.links:,} links;"
        f" simulated {results['one-vl'].sim_time_s:.3f} s under one-vl.",
    ]
    contention = {
        name: sum(r.jobs[j.id].t_s - t_alone[j.id] for j in sim_jobs) for name, r in results.items()
    }
    out.append(
        "Total contention (s): "
        + ", ".join(f"{name} {c:.4f}" for name, c in contention.items())
        + "."
    )
    return out, {"stages": stages, "flows": flows, "contention": contention}


def bench_512(rounds: int) -> tuple[list[str], dict[str, object]]:
    """What-ifs on the largest mix run per host by default, with the buffers that gives
    (8) and without."""
    net = xgft_network(parse_xgft(XGFT_512))
    jobs = jobs_2048(net, 4)
    sending = sum(len(j.nodes) for j in jobs)
    rows: list[list[str]] = []
    doc: dict[str, object] = {}
    for pol in ("one-vl", "ibqos"):
        for buffers in (None, 0):
            _, times = timed(partial(what_if, net, jobs, pol, buffers), rounds)
            said = "8 (default)" if buffers is None else str(buffers)
            rows.append([f"`--policy {pol}`", said, med(times), f"{min(times):.3f}"])
            doc[f"{pol} {said}"] = times
            say(f"512 nodes: what-if {pol} buffers {said} {med(times)} s")
    columns = ["what-if", "buffers (packets per lane per input)", "wall s (median)", "best"]
    return [
        f"{len(jobs)} jobs on {sending} hosts (per host: up to 512 sending hosts), 10"
        " iterations; a what-if as for 2,048 nodes.",
        "",
        *table(columns, rows, "lr"),
    ], doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sim.bench", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="timings per stage")
    parser.add_argument("--no-packet", action="store_true", help="skip the packet model")
    parser.add_argument("--no-cli", action="store_true", help="skip the `ibqos simulate` runs")
    parser.add_argument("--json", type=Path, help="write every timing here")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    load0 = os.getloadavg()[0]
    t64, d64 = bench_64(args.rounds, not args.no_packet)
    t2k, d2k = bench_2048(args.rounds, not args.no_cli)
    t512, d512 = bench_512(args.rounds)
    print(f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print(f"## 64 nodes ({XGFT_64}), {ITERATIONS} iterations, one sharing run\n")
    print("\n".join(t64))
    print(f"\n## 2,048 nodes ({XGFT_2048}), 20 jobs, fluid, {ITERATIONS} iterations\n")
    print("\n".join(t2k))
    print(f"\n## 512 nodes ({XGFT_512}), fluid per host, {ITERATIONS} iterations\n")
    print("\n".join(t512))
    if args.json:
        doc = {"machine": machine(), "64": d64, "2048": d2k, "512": d512}
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
