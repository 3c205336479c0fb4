"""The measuring child of :mod:`bench.collect.bench`: runs in a lab's environment (umad2sim
preloaded) and times every method in rounds, so that noise on the shared machine spreads
over all of them."""

from __future__ import annotations

import json
import os
import random
import resource
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.collect.methods import (
    BACKEND,
    MINIMAL,
    NATIVE,
    NATIVE_XW,
    PER_PORT,
    PER_SWITCH,
    WINDOWS,
    WORKERS,
    MinimalSender,
    PerfqueryJob,
    Run,
    per_port_jobs,
    per_switch_jobs,
    run_job,
)
from bench.machine import code_hash
from bench.report import say
from ibqos.collect.native import NativeBackend
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.pipeline import max_dgram_qlen, under_umad2sim
from ibqos.fabric.model import fabric_from_file
from ibqos.mad.umad import UmadPort

MIN_PORTS = 5000  # a timed measurement of native/minimal covers at least this many ports
SEED = 3  # the sample is the same on every run
#: the sources whose speed is measured (their hash is printed with the results)
CODE = (
    "collect/native.py",
    "collect/pipeline.py",
    "collect/native_table.py",
    "collect/perfquery.py",
    "collect/perfquery_parse.py",
    "collect/perfquery_plan.py",
    "collect/diags.py",
    "tools.py",
    "mad/umad.py",
    "mad/pma.py",
)


def _self_cpu() -> float:
    """CPU seconds of this process and its waited-for children (perfquery processes)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class _IbsimClock:
    """CPU seconds ibsim has used so far, from /proc/PID/stat (0 if it cannot be read)."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")

    def __call__(self) -> float:
        try:
            fields = self.path.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime, stime


class _Child:
    """Everything measured on one running lab."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.targets = fabric_from_file(cfg["discovered"]).targets()
        self.ibsim = _IbsimClock(cfg["ibsim_pid"])
        self.cap = max_dgram_qlen() - 2 if under_umad2sim() else max(WINDOWS)
        self.windows = [w for w in WINDOWS if w <= self.cap]
        rng = random.Random(SEED)
        n = len(self.targets)
        self.sample = sorted(rng.sample(range(n), min(n, cfg["sample"])))
        self.sample_one = self.sample[: min(n, cfg["sample_one"])]
        self.port = UmadPort()
        self.minimal = MinimalSender(self.port, self.targets)
        self.runs: list[Run] = []

    def _timed(
        self,
        method: str,
        setting: str,
        asked: int,
        fn: Callable[[], tuple[int, int]],
        sweeps: int = 1,
    ) -> Run:
        cpu0, ib0, t0 = _self_cpu(), self.ibsim(), time.monotonic()
        ports = mads = 0
        for _ in range(sweeps):
            p, m = fn()
            ports, mads = ports + p, mads + m
        dt = time.monotonic() - t0
        k = float(sweeps)
        run = Run(
            method,
            setting,
            asked,
            ports / k,
            mads / k,
            dt / k,
            (_self_cpu() - cpu0) / k,
            (self.ibsim() - ib0) / k,
            sweeps,
        )
        self.runs.append(run)
        say(
            f"  {method:28s} {setting:10s} {run.ports:8.0f}/{asked:<6d}"
            f" {run.ports_per_s:9.0f} ports/s {run.sweep_s:7.3f} s  cpu {run.cpu_s:6.3f} s"
            f"  ibsim {run.ibsim_cpu_s:6.3f} s  (x{sweeps})"
        )
        return run

    def probe(self) -> dict[str, Any]:
        """The first native sweep (default xmit_wait=True, window 8): probes and reads."""
        nb = NativeBackend(window=max(self.windows), transport=self.port)
        ib0 = self.ibsim()
        sw = nb.sweep(self.targets)
        first = {
            "sweep_s": sw.duration_s,
            "cpu_s": sw.cpu_s,
            "ibsim_cpu_s": self.ibsim() - ib0,
            "stats": sw.stats,
            "ports": len(self.targets) - sw.failed,
        }
        say(f"  first native sweep (probing): {sw.duration_s:.2f} s, {sw.stats}")
        self.caps = dict(nb.caps)
        return first

    def _native(self, window: int, xmit_wait: bool) -> NativeBackend:
        nb = NativeBackend(window=window, xmit_wait=xmit_wait, transport=self.port)
        nb.caps.update(self.caps)  # probed once above; every later sweep is steady state
        return nb

    def _native_fn(self, nb: NativeBackend) -> Callable[[], tuple[int, int]]:
        def fn() -> tuple[int, int]:
            sw = nb.sweep(self.targets)
            return len(self.targets) - sw.failed, sw.stats["sent"]

        return fn

    def _minimal_fn(self, window: int) -> Callable[[], tuple[int, int]]:
        def fn() -> tuple[int, int]:
            sent, answered = self.minimal.sweep(window)
            return answered, sent

        return fn

    def _pool_fn(self, jobs: list[PerfqueryJob], workers: int) -> Callable[[], tuple[int, int]]:
        def fn() -> tuple[int, int]:
            with ThreadPoolExecutor(workers) as pool:
                out = list(pool.map(run_job, jobs))
            return sum(p for p, _ in out), sum(m for _, m in out)

        return fn

    def _backend_fn(self) -> Callable[[], tuple[int, int]]:
        def fn() -> tuple[int, int]:
            with PerfqueryBackend(WORKERS, per_switch=True, xmit_wait=False, cwd=Path.cwd()) as b:
                sw = b.sweep(self.targets)
            return len(self.targets) - sw.failed, sw.stats["mads"]

        return fn

    def measure(self) -> dict[str, Any]:
        first = self.probe()
        natives = {(w, xw): self._native(w, xw) for w in self.windows for xw in (False, True)}
        for nb in (natives[(max(self.windows), False)], natives[(max(self.windows), True)]):
            nb.sweep(self.targets)  # warm-up
        self.minimal.sweep(max(self.windows))
        picked = [self.targets[i] for i in self.sample]
        picked_one = [self.targets[i] for i in self.sample_one]
        n = len(self.targets)
        reps = max(1, -(-MIN_PORTS // n))  # sweeps per measurement of the fast methods
        plan: list[tuple[str, str, int, Callable[[], tuple[int, int]], int]] = []
        for w in self.windows:
            plan.append((NATIVE, f"window {w}", n, self._native_fn(natives[(w, False)]), reps))
            plan.append((NATIVE_XW, f"window {w}", n, self._native_fn(natives[(w, True)]), reps))
            plan.append((MINIMAL, f"window {w}", n, self._minimal_fn(w), reps))
        per_port = self._pool_fn(per_port_jobs(picked), WORKERS)
        per_port_one = self._pool_fn(per_port_jobs(picked_one), 1)
        per_switch = self._pool_fn(per_switch_jobs(self.targets), WORKERS)
        plan += [
            (PER_PORT, f"{WORKERS} workers", len(picked), per_port, 1),
            (PER_PORT, "1 worker", len(picked_one), per_port_one, 1),
            (PER_SWITCH, f"{WORKERS} workers", n, per_switch, 1),
        ]
        profile = None
        for r in range(self.cfg["repeat"]):
            say(f" round {r + 1}/{self.cfg['repeat']}")
            for method, setting, asked, fn, sweeps in plan:
                self._timed(method, setting, asked, fn, sweeps)
            if self.cfg["backend"] and r == 0:  # an extra column: one sweep is enough
                self._timed(BACKEND, f"{WORKERS} workers", n, self._backend_fn())
        if self.cfg["profile"]:
            profile = self._profile(natives)
        self.port.close()
        return {
            "targets": n,
            "switch_lids": len({t.lid for t in self.targets if t.is_switch}),
            "sample": len(picked),
            "sample_one": len(picked_one),
            "window_cap": self.cap,
            "first_sweep": first,
            "repeat": self.cfg["repeat"],
            "reps": reps,
            "runs": [asdict(r) for r in self.runs],
            "profile": profile,
        }

    def _profile(self, natives: dict[tuple[int, bool], NativeBackend]) -> str:
        import cProfile
        import io
        import pstats

        out = io.StringIO()
        for xw in (False, True):
            prof = cProfile.Profile()
            nb = natives[(max(self.windows), xw)]
            prof.runcall(nb.sweep, self.targets)
            out.write(f"--- native sweep, xmit_wait={xw}, window {max(self.windows)}\n")
            stats = pstats.Stats(prof, stream=out)
            stats.sort_stats("tottime").print_stats(14)
            stats.sort_stats("cumulative").print_stats(r"ibqos/(collect|mad)/", 12)
        return out.getvalue()


def child_main(config: Path) -> int:
    """Measure as the parent's *config* file says; write the results where it says."""
    cfg = json.loads(config.read_text())
    code = code_hash(CODE)  # of the sources this process has just imported
    result = _Child(cfg).measure()
    result["code"] = code
    Path(cfg["out"]).write_text(json.dumps(result))
    return 0
