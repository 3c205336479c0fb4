"""Benchmark the lab: time for 'lab up' and for one traffic tick, by fabric size.

Usage: python -m bench.lab.bench [XGFT ...]   (default: 32, 256, 2048 and 4096 hosts)

Each fabric runs a job mix that covers every host: all-to-all jobs of 16 hosts taken with
a stride, so every leaf uplink carries traffic and every port is written each tick (the
worst case for PerformanceSet lines).  Prints a Markdown table; the numbers in
docs/lab.md come from it.  Wall-clock times on a shared 2-core machine: compare sizes
with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.report import head, row
from ibqos.errors import IbqosError
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.jobfile import dump_jobs, parse_jobs
from ibqos.lab.lab import Lab

DEFAULT = ["2;8,4;1,2", "2;16,16;1,8", "3;16,16,8;1,8,8", "3;16,16,16;1,8,8"]
TICKS = 5


def job_mix(hosts: int, size: int = 16) -> str:
    njobs = hosts // size
    jobs = [
        {
            "id": str(1000 + k),
            "nodes": [f"cn{k + 1 + i * njobs:04d}" for i in range(size)],
            "pattern": "all-to-all",
            "rate_bytes_per_s": 1.0e9,
            "duty": 0.5,
            "period_s": 0.05,
        }
        for k in range(njobs)
    ]
    return dump_jobs(parse_jobs({"jobs": jobs}, "bench"))


def bench(xgft: str, workdir: Path) -> dict[str, float | int | str]:
    spec = parse_xgft(xgft)
    topo = build_xgft(spec)
    jobs = workdir / f"jobs-{spec.hosts}.yaml"
    jobs.write_text(job_mix(spec.hosts))
    t0 = time.monotonic()
    lab = Lab.create(f"b{spec.hosts}", topo, root=workdir / "labs", jobs=jobs)
    try:
        lab.start(timeout=900)
        up = time.monotonic() - t0
        ticks, model, write, lines = [], [], [], 0
        for _ in range(TICKS):
            t = time.monotonic()
            lines = lab.tick(1.0)
            ticks.append(time.monotonic() - t)
            model.append(lab.timings["tick_model_s"])
            write.append(lab.timings["tick_write_s"])
        ports = len(lab.model.router.ports) if lab.model else 0
        return {
            "xgft": xgft,
            "hosts": spec.hosts,
            "switches": spec.switches,
            "ports": ports,
            "up_s": up,
            "opensm_s": lab.timings["opensm_s"],
            "discover_s": lab.timings["discover_s"],
            "clear_s": lab.timings["clear_s"],
            "jobs_s": lab.timings["jobs_s"],
            "tick_s": statistics.median(ticks),
            "tick_model_s": statistics.median(model),
            "tick_write_s": statistics.median(write),
            "lines": lines,
        }
    finally:
        lab.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lab.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "xgft", nargs="*", default=DEFAULT, help="XGFT specs (default: " + ", ".join(DEFAULT) + ")"
    )
    shapes = parser.parse_args(argv).xgft
    cols = [
        ("XGFT", "xgft", "{}"),
        ("hosts", "hosts", "{}"),
        ("switches", "switches", "{}"),
        ("ports", "ports", "{}"),
        ("lab up s", "up_s", "{:.1f}"),
        ("OpenSM up s", "opensm_s", "{:.1f}"),
        ("discovery s", "discover_s", "{:.1f}"),
        ("clear s", "clear_s", "{:.1f}"),
        ("route jobs s", "jobs_s", "{:.2f}"),
        ("tick s", "tick_s", "{:.2f}"),
        ("model s", "tick_model_s", "{:.2f}"),
        ("ibsim write s", "tick_write_s", "{:.2f}"),
        ("lines/tick", "lines", "{}"),
    ]
    print("\n".join(head([c[0] for c in cols])))
    with tempfile.TemporaryDirectory(prefix="ibqos-bench-") as tmp:
        for xgft in shapes:
            try:
                got = bench(xgft, Path(tmp))
            except IbqosError as err:
                print(row([xgft, f"failed: {err}"]))
                continue
            print(row([f.format(got[k]) for _, k, f in cols]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
