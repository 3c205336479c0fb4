"""Benchmark the exporter: scrape time, exposition size and series on synthetic fabrics.

Usage: python -m bench.metrics.bench [--cases 1k/100,50k/5000] [--rounds N]

Fabrics, workloads and rates are ``bench.plan.bench``'s (three-level XGFTs, log-normal job sizes,
70 % contiguous placements, SEED).  Per case, a decider runs two cycles (the second is the
one exported), then, timed over ``--rounds`` rounds:

- ``snapshot``: :func:`ibqos.metrics.build_snapshot` (the agent's thread, once per cycle);
- ``first HTTP``: a real scrape of the running endpoint on loopback with
  ``Accept-Encoding: gzip``, as Prometheus asks for it (request to last byte), right after
  a new snapshot: the metric families are built and rendered (``families.exposition``);
- ``HTTP``: a later scrape of the same snapshot (its text cached until the next one);
- baseline ``generate_latest``: prometheus-client's own text rendering of the same
  families (already built), what ``make_wsgi_app`` would do on every scrape.

Sizes: the text exposition, gzipped as served, and the number of series (sample lines).
The same with ``metrics.per_port`` on the largest case.  docs/metrics.md holds one run.
Wall-clock times on a shared 2-core machine: read the ratios.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable

import numpy as np
from prometheus_client import generate_latest

from bench.machine import machine
from bench.plan.inputs import SEED, SHAPES, build_fabric, hosts_of, rates_tables, workload
from bench.report import table
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import MetricsConfig
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.metrics import AgentMetrics, Counters, Snapshot, build_snapshot, level_capacities
from ibqos.metrics.server import Exporter, metrics_app
from ibqos.plan.decide import Decider

CASES = (("1k", 100), ("10k", 1000), ("50k", 5000))
CYCLE_S = 10.0  # the agent's default interval: what a scrape must stay well under
COLUMNS = (
    "ports",
    "jobs",
    "per-port",
    "series",
    "exposition",
    "gzipped",
    "snapshot ms",
    "first HTTP scrape ms",
    "later HTTP scrape ms",
    "baseline generate_latest ms",
    "baseline / first",
    "first / 10 s cycle",
)


def median_s(work: Callable[[], object], rounds: int) -> float:
    """The median wall time of *rounds* calls of *work*, seconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(size: str, n_jobs: int, rounds: int, per_port: bool) -> dict[str, float]:
    rng = np.random.default_rng(SEED)
    fabric = build_fabric(build_xgft(parse_xgft(SHAPES[size])))
    jobs = workload(hosts_of(fabric), n_jobs, rng)
    tables = rates_tables(fabric, jobs, rng, 2)
    for rates in tables:  # the columns a real sweep also has
        rates["rcv_bytes_per_s"] = rates["xmit_bytes_per_s"]
        rates["xmit_wait_per_s"] = rng.uniform(0, 1e5, len(rates))
        rates["interval_s"] = CYCLE_S
    decider = Decider(fabric, LaneConfig(), Thresholds())
    decider.decide(tables[0], list(jobs), 0.0)
    decision = decider.decide(tables[1], list(jobs), 10.0)
    capacity = level_capacities(fabric)

    def snapshot() -> Snapshot:
        return build_snapshot(decision, tables[1], capacity, time.time(), per_port=per_port)

    metrics = AgentMetrics(Counters(), fabric="bench", routing_engine="ftree", dry_run=False)
    snap = snapshot()

    metrics.snapshot.publish(snap)
    out: dict[str, float] = {"ports": len(fabric.ports), "jobs": n_jobs}
    out["snapshot"] = median_s(snapshot, rounds)
    out["generic"] = median_s(lambda: generate_latest(metrics.registry), rounds)
    text = generate_latest(metrics.registry)
    out["bytes"] = len(text)
    out["gzip"] = len(gzip.compress(text))
    out["series"] = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    exporter = Exporter(metrics_app(metrics), MetricsConfig(listen=("127.0.0.1", 0)))
    try:
        # the URL is our own loopback endpoint
        req = urllib.request.Request(exporter.url, headers={"Accept-Encoding": "gzip"})  # noqa: S310

        def http() -> None:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                resp.read()

        def first_http() -> None:
            metrics.snapshot.publish(snap)  # drops the built families and their text
            http()

        out["first_http"] = median_s(first_http, rounds)
        out["http"] = median_s(http, rounds)
    finally:
        exporter.close()
    return out


def ms(x: float) -> str:
    return f"{x * 1e3:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.metrics.bench", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--cases", default=",".join(f"{s}/{j}" for s, j in CASES))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    cases = [(s, int(j)) for s, j in (c.split("/") for c in args.cases.split(","))]
    runs = [(s, j, False) for s, j in cases] + [(*cases[-1], True)]
    rows = []
    for size, n_jobs, per_port in runs:
        print(f"{size} ports, {n_jobs} jobs, per_port={per_port} ...", file=sys.stderr)
        rows.append((per_port, measure(size, n_jobs, args.rounds, per_port)))
    print(f"machine: {machine()}; median of {args.rounds} rounds\n")
    cells = [
        [
            f"{r['ports']:,.0f}",
            f"{r['jobs']:,.0f}",
            "yes" if per_port else "no",
            f"{r['series']:,.0f}",
            f"{r['bytes'] / 1e6:.1f} MB",
            f"{r['gzip'] / 1e6:.2f} MB",
            ms(r["snapshot"]),
            ms(r["first_http"]),
            ms(r["http"]),
            ms(r["generic"]),
            f"x{r['generic'] / r['first_http']:.1f}",
            f"{r['first_http'] / CYCLE_S:.1%}",
        ]
        for per_port, r in rows
    ]
    print("\n".join(table(COLUMNS, cells, "r")))
    base, big = rows[0][1], rows[len(cases) - 1][1]
    if big is not base:
        print(
            f"\nfrom {base['ports']:,.0f} ports/{base['jobs']:,.0f} jobs to"
            f" {big['ports']:,.0f}/{big['jobs']:,.0f}:"
            f" series x{big['series'] / base['series']:.0f},"
            f" first HTTP scrape x{big['first_http'] / base['first_http']:.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
