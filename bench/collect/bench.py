"""Benchmark counter collection: full sweeps of lab fabrics, every method side by side.

Usage: python -m bench.collect.bench [--sizes small,medium,large] [--repeat N] [--json FILE]
       [--profile] [--no-backend] [--tmpdir DIR]

For each fabric size this starts a lab (ibsim + OpenSM, no jobs: idle counters are fine
for timing), then runs one child process (:mod:`bench.collect.child`) with the lab's
environment (umad2sim preloaded) that measures, in rounds so that noise on the shared
machine spreads over all methods:

- ``native``: ``NativeBackend`` data only (``xmit_wait=False``: one PortCountersExtended
  Get per port) and with XmitWait (ibsim's CapMask2 is 0, so one more PortCounters Get per
  port), at in-flight windows 1, 2, 4 and 8;
- ``minimal``: a bare pipelined ctypes sender (:mod:`bench.collect.methods`) that only
  sends PortCountersExtended Gets (one per port, prebuilt buffers, one ``umad_send`` call
  each) and counts the replies;
  the limit of what ibsim and libibumad/umad2sim serve here; same windows;
- ``perfquery -x LID PORT``, one process per port, by a pool of 6 workers and of 1;
- ``perfquery -x -l LID 255``, one process per switch; CA ports, whose PMA has no
  AllPortSelect (perfquery then stops with "AllPortSelect not supported"), one process
  per port (``perfquery -x LID PORT``) in the same pool;
- ``PerfqueryBackend`` (ibqos's own perfquery backend, per-switch port lists, data only).

The labs live in a private directory under /dev/shm (tmpfs) when there is one
(``--tmpdir``): every umad2sim client builds a fake sysfs tree (``sys-<pid>/``, about 130
files) in the lab's run directory when it starts, which costs a perfquery process about
40 ms of system time on this VM's ext4 and under 1 ms on tmpfs.  On a real host libibumad
reads the kernel's sysfs instead, so tmpfs is the fairer stand-in for perfquery.

Windows stop at 8: under umad2sim more than ``net.unix.max_dgram_qlen`` - 2 requests in
flight can deadlock (umad2sim holds its lock while writing to ibsim's datagram socket), and
``NativeBackend`` caps its window there.  ibsim takes at most 10 clients (OpenSM, this
child, the perfquery workers), so pools have at most 6 workers.

The native backend's first sweep probes capabilities (ClassPortInfo per node, per-SL
counters per switch); it is reported on its own, and the timed sweeps are steady state.
Per-port perfquery on the large fabric times a fixed random sample of ports.  Prints a
Markdown table per size, the window curves and a check of the issue's targets on the
largest fabric; docs/collect-benchmark.md holds one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import child_env
from bench.collect.child import CODE, child_main
from bench.collect.report import size_tables, targets_check
from bench.machine import code_hash, machine_info
from bench.report import say
from ibqos.errors import IbqosError
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab

SIZES: dict[str, str] = {
    "small": "2;8,4;1,2",  # 32 hosts, 82 ports
    "medium": "2;16,20;1,8",  # 320 hosts, 962 ports
    "large": "3;32,16,16;1,16,8",  # 8192 hosts, 28674 ports: the largest lab run so far
}
SAMPLE = 2000  # ports timed by per-port perfquery (6 workers) when the fabric is larger
SAMPLE_ONE = 300  # ... and by per-port perfquery with a single worker
#: the packages whose versions are printed with the results
PACKAGES = ("ibsim-utils", "opensm", "infiniband-diags", "libibumad3")


def bench_size(label: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start the lab of one size, run the measuring child in it, stop the lab."""
    xgft = SIZES[label]
    spec = parse_xgft(xgft)
    t0 = time.monotonic()
    # no periodic OpenSM sweeps: they would load ibsim in the middle of a timed sweep
    lab = Lab.create(
        f"bc{label}",
        build_xgft(spec),
        root=workdir / "labs",
        opensm_options={"sweep_interval": "0"},
    )
    try:
        lab.start(timeout=900)
        up = time.monotonic() - t0
        say(f"{label} ({xgft}): lab up in {up:.1f} s, load {os.getloadavg()[0]:.2f}")
        assert lab.ibsim is not None and lab.ibsim.proc is not None
        out = workdir / f"{label}.json"
        cfg = {
            "discovered": str(lab.paths.discovered),
            "ibsim_pid": lab.ibsim.proc.pid,
            "repeat": args.repeat,
            "sample": SAMPLE,
            "sample_one": SAMPLE_ONE,
            "backend": not args.no_backend,
            "profile": args.profile,
            "out": str(out),
        }
        cfg_path = workdir / f"{label}-config.json"
        cfg_path.write_text(json.dumps(cfg))
        load0 = os.getloadavg()
        subprocess.run(
            [sys.executable, "-m", "bench.collect.bench", "--child", str(cfg_path)],
            env=child_env(lab.env()),
            cwd=lab.paths.run,
            stdout=sys.stderr,
            check=True,
            timeout=7200,
        )
        result: dict[str, Any] = json.loads(out.read_text())
        result.update(
            size=label,
            xgft=xgft,
            hosts=spec.hosts,
            switches=spec.switches,
            lab_up_s=up,
            loadavg_before=load0,
            loadavg_after=os.getloadavg(),
        )
        return result
    finally:
        lab.destroy()


def _default_tmpdir() -> Path | None:
    shm = Path("/dev/shm")  # noqa: S108 - only the parent of a private mkdtemp directory
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.collect.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--sizes", default="small,medium,large", help="subset of " + ",".join(SIZES)
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed sweeps per method (rounds)")
    parser.add_argument("--json", type=Path, help="also write every run to this file")
    parser.add_argument(
        "--no-backend", action="store_true", help="skip the PerfqueryBackend column"
    )
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile of one native sweep per mode"
    )
    parser.add_argument(
        "--tmpdir",
        type=Path,
        default=_default_tmpdir(),
        help="where the labs live (default /dev/shm: see the module docstring)",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown or args.repeat < 1:
        parser.error(f"unknown sizes {unknown}" if unknown else "--repeat must be >= 1")
    info = machine_info(PACKAGES)
    info["code"] = code_hash(CODE)
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ibqos-bench-collect-", dir=args.tmpdir) as tmp:
        for label in sizes:
            try:
                result = bench_size(label, args, Path(tmp))
            except (IbqosError, subprocess.SubprocessError) as err:
                print(f"\n{label}: failed: {err}", flush=True)
                continue
            results.append(result)
            print("\n" + "\n".join(size_tables(result)), flush=True)
            if result.get("profile"):
                print("\n```\n" + result["profile"] + "```", flush=True)
    if code_hash(CODE) != info["code"]:
        print(f"\nWarning: {', '.join(CODE)} changed during the run", flush=True)
    if results:
        largest = max(results, key=lambda r: r["targets"])
        print("\n" + "\n".join(targets_check(largest)), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "sizes": results}, indent=1) + "\n")
    return 0 if len(results) == len(sizes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
