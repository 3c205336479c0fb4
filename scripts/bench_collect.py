"""Benchmark counter collection: full sweeps of lab fabrics, every method side by side.

Usage: python scripts/bench_collect.py [--sizes small,medium,large] [--repeat N] [--json FILE]
       [--profile] [--no-backend] [--tmpdir DIR]

For each fabric size this starts a lab (ibsim + OpenSM, no jobs: idle counters are fine
for timing), then runs one child process with the lab's environment (umad2sim preloaded)
that measures, in rounds so that noise on the shared machine spreads over all methods:

- ``native``: ``NativeBackend`` data only (``xmit_wait=False``: one PortCountersExtended
  Get per port) and with XmitWait (ibsim's CapMask2 is 0, so one more PortCounters Get per
  port), at in-flight windows 1, 2, 4 and 8;
- ``minimal``: a bare pipelined ctypes sender that only sends PortCountersExtended Gets
  (one per port, prebuilt buffers, one ``umad_send`` call each) and counts the replies;
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
import ctypes
import hashlib
import json
import os
import random
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ibqos
from ibqos.collect.native import NativeBackend
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.perfquery_parse import parse_perfquery
from ibqos.collect.pipeline import max_dgram_qlen, under_umad2sim
from ibqos.errors import IbqosError, MadError
from ibqos.fabric.model import fabric_from_file
from ibqos.fabric.targets import Target
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab
from ibqos.mad import pma
from ibqos.mad.umad import UmadPort

SIZES: dict[str, str] = {
    "small": "2;8,4;1,2",  # 32 hosts, 82 ports
    "medium": "2;16,20;1,8",  # 320 hosts, 962 ports
    "large": "3;32,16,16;1,16,8",  # 8192 hosts, 28674 ports: the largest lab run so far
}
WINDOWS = (1, 2, 4, 8)
WORKERS = 6  # ibsim: 10 clients at most; OpenSM and the child take two
SAMPLE = 2000  # ports timed by per-port perfquery (6 workers) when the fabric is larger
SAMPLE_ONE = 300  # ... and by per-port perfquery with a single worker
MIN_PORTS = 5000  # a timed measurement of native/minimal covers at least this many ports
SEED = 3  # the sample is the same on every run
PQ_TIMEOUT_S = 30.0
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

NATIVE = "native data-only"
NATIVE_XW = "native + XmitWait"
MINIMAL = "minimal sender"
PER_PORT = "perfquery per port"
PER_SWITCH = "perfquery -l per switch"
BACKEND = "PerfqueryBackend per switch"


@dataclass
class Run:
    """One timed measurement of one method: *sweeps* sweeps back to back, per sweep.

    Attributes:
        method: one of the names above.
        setting: "window N" or "N workers".
        asked: ports a sweep was to read (all targets, or the sample).
        ports: ports read (good replies), per sweep.
        mads: MADs sent per sweep (perfquery: ClassPortInfo, SMPs and one Get per port
            it printed).
        sweep_s: wall-clock seconds per sweep.
        cpu_s: CPU seconds of the collecting process and its children, per sweep.
        ibsim_cpu_s: CPU seconds ibsim spent meanwhile, per sweep.
        sweeps: sweeps timed together (several on a small fabric, so that the clock
            measures more than a few milliseconds).
    """

    method: str
    setting: str
    asked: int
    ports: float
    mads: float
    sweep_s: float
    cpu_s: float
    ibsim_cpu_s: float
    sweeps: int = 1

    @property
    def ports_per_s(self) -> float:
        return self.ports / self.sweep_s if self.sweep_s > 0 else 0.0

    @property
    def mads_per_s(self) -> float:
        return self.mads / self.sweep_s if self.sweep_s > 0 else 0.0


# -- the child: measures, in the lab's environment ------------------------------------


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


class MinimalSender:
    """Sends one PortCountersExtended Get per target, *window* in flight, counts replies.

    The least a collector can do per port: every request buffer (umad header with the
    address, then the MAD) is built once; a send patches the transaction id and calls
    ``umad_send``; a reply is counted after a check that its transaction id is one of
    this sweep's.  Nothing is decoded and nothing is sent again.
    """

    def __init__(self, port: UmadPort, targets: Sequence[Target], timeout_ms: int = 1000) -> None:
        self.port = port
        self.n = len(targets)
        self.timeout_ms = timeout_ms
        self.size = port.size
        self.bufs = (ctypes.c_char * (self.size * max(1, self.n)))()
        base = ctypes.addressof(self.bufs)
        self.view = memoryview(self.bufs).cast("B")
        tmpl = pma.get_request(pma.ATTR_PORT_COUNTERS_EXT)
        hdr = port.hdr
        for i, tg in enumerate(targets):
            off = i * self.size
            self.view[off + hdr : off + hdr + pma.MAD_SIZE] = tmpl
            self.view[off + hdr + pma.DATA_OFFSET + 1] = tg.port
            port.lib.umad_set_addr(base + off, tg.lid, 1, 0, pma.QP1_QKEY)
        self.addrs = [base + i * self.size for i in range(self.n)]
        self.tid_at = [i * self.size + hdr + pma.TID_LOW_OFFSET for i in range(self.n)]
        self.rx_tid_at = hdr + pma.TID_LOW_OFFSET
        self.tid = int.from_bytes(os.urandom(4), "big")

    def sweep(self, window: int) -> tuple[int, int]:
        """One pass over every target.  Returns (sent, answered)."""
        lib, fd, agent = self.port.lib, self.port.fd, self.port.agent
        send, recv = lib.umad_send, lib.umad_recv
        rbuf, raddr = self.port.recv_buf, self.port.recv_addr
        length = ctypes.c_int(self.size)
        length_ref = ctypes.byref(length)
        pack = struct.Struct(">I").pack_into
        unpack = struct.Struct(">I").unpack_from
        status = struct.Struct("=I").unpack_from  # ib_user_mad.status, after agent_id
        view, addrs, tid_at, rx_at = self.view, self.addrs, self.tid_at, self.rx_tid_at
        n, base, timeout = self.n, self.tid, self.timeout_ms
        self.tid = (base + n + 1) & 0xFFFFFFFF
        sent = answered = settled = flying = 0
        while settled < n:
            while flying < window and sent < n:
                pack(view, tid_at[sent], (base + sent) & 0xFFFFFFFF)
                if send(fd, agent, addrs[sent], pma.MAD_SIZE, timeout, 0) < 0:
                    raise OSError("umad_send failed")
                sent += 1
                flying += 1
            length.value = self.size
            if recv(fd, raddr, length_ref, timeout) < 0:
                settled += flying  # nothing came back in time: count what is out as lost
                flying = 0
                continue
            if (unpack(rbuf, rx_at)[0] - base) & 0xFFFFFFFF >= n:
                continue  # a stray reply from an earlier sweep
            flying -= 1
            settled += 1
            if status(rbuf, 4)[0] == 0:
                answered += 1
        return sent, answered


@dataclass(frozen=True)
class _Job:
    """One perfquery process: its command line, and which target ports it should print."""

    argv: tuple[str, ...]
    lid: int
    want: frozenset[int]
    smps: int  # SMPs it sends before its PMA Gets (NodeInfo, SwitchInfo for -l 255)


def _run_job(job: _Job) -> tuple[int, int]:
    """Run one perfquery; return (target ports it printed, MADs it sent)."""
    try:
        proc = subprocess.run(
            job.argv, capture_output=True, text=True, timeout=PQ_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return 0, 1 + job.smps
    try:
        blocks, _ = parse_perfquery(proc.stdout, " ".join(job.argv))
    except MadError:
        blocks = []
    printed = {b.port for b in blocks if b.lid == job.lid}
    return len(printed & job.want), 1 + job.smps + len(blocks)  # ClassPortInfo first


def _per_port_jobs(targets: Sequence[Target]) -> list[_Job]:
    return [
        _Job(("perfquery", "-x", str(t.lid), str(t.port)), t.lid, frozenset([t.port]), 0)
        for t in targets
    ]


def _per_switch_jobs(targets: Sequence[Target]) -> list[_Job]:
    """``-l LID 255`` per switch, then ``LID PORT`` per CA port (no AllPortSelect there)."""
    by_lid: dict[int, set[int]] = {}
    for t in targets:
        if t.is_switch:
            by_lid.setdefault(t.lid, set()).add(t.port)
    jobs = [
        _Job(("perfquery", "-x", "-l", str(lid), "255"), lid, frozenset(ports), 2)
        for lid, ports in by_lid.items()
    ]
    return jobs + _per_port_jobs([t for t in targets if not t.is_switch])


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
        _say(
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
        _say(f"  first native sweep (probing): {sw.duration_s:.2f} s, {sw.stats}")
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

    def _pool_fn(self, jobs: list[_Job], workers: int) -> Callable[[], tuple[int, int]]:
        def fn() -> tuple[int, int]:
            with ThreadPoolExecutor(workers) as pool:
                out = list(pool.map(_run_job, jobs))
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
        per_port = self._pool_fn(_per_port_jobs(picked), WORKERS)
        per_port_one = self._pool_fn(_per_port_jobs(picked_one), 1)
        per_switch = self._pool_fn(_per_switch_jobs(self.targets), WORKERS)
        plan += [
            (PER_PORT, f"{WORKERS} workers", len(picked), per_port, 1),
            (PER_PORT, "1 worker", len(picked_one), per_port_one, 1),
            (PER_SWITCH, f"{WORKERS} workers", n, per_switch, 1),
        ]
        profile = None
        for r in range(self.cfg["repeat"]):
            _say(f" round {r + 1}/{self.cfg['repeat']}")
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


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child_main(config: Path) -> int:
    cfg = json.loads(config.read_text())
    code = code_digest()  # of the sources this process has just imported
    result = _Child(cfg).measure()
    result["code"] = code
    Path(cfg["out"]).write_text(json.dumps(result))
    return 0


# -- the parent: labs, tables, targets ---------------------------------------------


def code_digest() -> str:
    """A short hash of the collector sources measured, to tell runs (and mid-run edits) apart."""
    root = Path(ibqos.__file__).parent
    h = hashlib.sha256()
    for rel in CODE:
        h.update((root / rel).read_bytes())
    return h.hexdigest()[:12]


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    info = {"nproc": str(os.cpu_count()), "cpu": model}
    for pkg in ("ibsim-utils", "opensm", "infiniband-diags", "libibumad3"):
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", pkg],
            capture_output=True,
            text=True,
            check=False,
        )
        info[pkg] = out.stdout.strip() or "?"
    info["max_dgram_qlen"] = Path("/proc/sys/net/unix/max_dgram_qlen").read_text().strip()
    info["python"] = sys.version.split()[0]
    return info


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
        _say(f"{label} ({xgft}): lab up in {up:.1f} s, load {os.getloadavg()[0]:.2f}")
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
            [sys.executable, str(Path(__file__).resolve()), "--child", str(cfg_path)],
            env=lab.env(),
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


@dataclass
class Row:
    """The runs of one method and setting, summarised."""

    method: str
    setting: str
    runs: list[Run]

    def med(self, key: Callable[[Run], float]) -> float:
        return statistics.median(key(r) for r in self.runs)

    @property
    def ports_per_s(self) -> float:
        return self.med(lambda r: r.ports_per_s)

    @property
    def best_ports_per_s(self) -> float:
        return max(r.ports_per_s for r in self.runs)

    @property
    def mads_per_s(self) -> float:
        return self.med(lambda r: r.mads_per_s)


def rows_of(result: dict[str, Any]) -> dict[tuple[str, str], Row]:
    rows: dict[tuple[str, str], Row] = {}
    for r in result["runs"]:
        run = Run(**r)
        rows.setdefault((run.method, run.setting), Row(run.method, run.setting, [])).runs.append(
            run
        )
    return rows


def best(rows: dict[tuple[str, str], Row], method: str) -> Row:
    """The setting of *method* with the highest median ports/s."""
    return max((r for r in rows.values() if r.method == method), key=lambda r: r.ports_per_s)


def table(result: dict[str, Any]) -> list[str]:
    """The Markdown table of one size, the window curve and the first native sweep."""
    rows = rows_of(result)
    ref_port = rows[(PER_PORT, f"{WORKERS} workers")].ports_per_s
    ref_switch = rows[(PER_SWITCH, f"{WORKERS} workers")].ports_per_s
    ref_min = best(rows, MINIMAL).ports_per_s
    n = result["targets"]
    out = [
        f"### {result['size']}: XGFT `{result['xgft']}`, {result['hosts']} hosts, "
        f"{result['switches']} switches, {n} ports (code {result['code']})",
        "",
        f"Lab up in {result['lab_up_s']:.1f} s; load average "
        f"{result['loadavg_before'][0]:.2f} before, {result['loadavg_after'][0]:.2f} after. "
        f"Median of {result['repeat']} rounds (best in brackets); {n} ports per sweep"
        f" except where a sample is timed; native and minimal sweeps are timed"
        f" {result['reps']} at a time and shown per sweep.",
        "",
        "| method | window/workers | ports timed | ports/s | MADs/s | sweep s | CPU s "
        "| ibsim CPU s | vs per-port perfquery | vs per-switch perfquery | vs minimal sender |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown = [
        best(rows, NATIVE),
        best(rows, NATIVE_XW),
        best(rows, MINIMAL),
        rows[(PER_PORT, f"{WORKERS} workers")],
        rows[(PER_PORT, "1 worker")],
        rows[(PER_SWITCH, f"{WORKERS} workers")],
    ]
    if (BACKEND, f"{WORKERS} workers") in rows:
        shown.append(rows[(BACKEND, f"{WORKERS} workers")])
    for row in shown:
        asked = row.runs[0].asked
        timed = f"{asked}" if asked == n else f"{asked} (random sample)"
        bad = max(r.asked - r.ports for r in row.runs)
        if bad:
            timed += f", up to {bad:.0f} not read"
        if len(row.runs) == 1:
            timed += ", 1 round"
        pps = row.ports_per_s
        out.append(
            f"| {row.method} | {row.setting} | {timed} | {pps:,.0f} ({row.best_ports_per_s:,.0f})"
            f" | {row.mads_per_s:,.0f} | {row.med(lambda r: r.sweep_s):.2f}"
            f" | {row.med(lambda r: r.cpu_s):.2f} | {row.med(lambda r: r.ibsim_cpu_s):.2f}"
            f" | {pps / ref_port:,.1f}x | {pps / ref_switch:,.2f}x | {pps / ref_min:.0%} |"
        )
    first = result["first_sweep"]
    st = first["stats"]
    out += [
        "",
        f"First native sweep (probing, window {result['window_cap']}, with XmitWait): "
        f"{first['sweep_s']:.2f} s, CPU {first['cpu_s']:.2f} s, ibsim CPU "
        f"{first['ibsim_cpu_s']:.2f} s; {st.get('sent', 0)} MADs sent, "
        f"{st.get('answered', 0)} answered, {st.get('timeouts', 0)} timeouts; "
        f"{first['ports']} of {n} ports read.",
        "",
        "Window curve (median ports/s; MADs/s in brackets):",
        "",
        "| window | native data-only | native + XmitWait | minimal sender "
        "| data-only / minimal | + XmitWait / minimal (MADs/s) |",
        "|---|---|---|---|---|---|",
    ]
    windows = sorted({int(s.split()[1]) for m, s in rows if m == MINIMAL})
    for w in windows:
        a, b, c = (rows[(m, f"window {w}")] for m in (NATIVE, NATIVE_XW, MINIMAL))
        out.append(
            f"| {w} | {a.ports_per_s:,.0f} ({a.mads_per_s:,.0f}) | {b.ports_per_s:,.0f} "
            f"({b.mads_per_s:,.0f}) | {c.ports_per_s:,.0f} ({c.mads_per_s:,.0f}) "
            f"| {a.ports_per_s / c.ports_per_s:.0%} | {b.mads_per_s / c.mads_per_s:.0%} |"
        )
    return out


def _ports_per_s(r: Run) -> float:
    return r.ports_per_s


def _mads_per_s(r: Run) -> float:
    return r.mads_per_s


def _per_round(a: Row, b: Row, key: Callable[[Run], float]) -> float:
    """Median over rounds of a's figure over b's in the same round (rounds interleave the
    methods, so this cancels noise that hits one round)."""
    return statistics.median(key(x) / key(y) for x, y in zip(a.runs, b.runs, strict=False))


def targets_check(result: dict[str, Any]) -> list[str]:
    """The issue's three targets on one (the largest) fabric, for both native modes.

    The verdict compares medians; the median of per-round ratios is shown beside it.
    """
    rows = rows_of(result)
    per_port = rows[(PER_PORT, f"{WORKERS} workers")]
    per_switch = rows[(PER_SWITCH, f"{WORKERS} workers")]
    mini = best(rows, MINIMAL)
    modes = [best(rows, NATIVE), best(rows, NATIVE_XW)]
    pps, mps = _ports_per_s, _mads_per_s
    checks: list[tuple[str, Row, Callable[[Run], float], float]] = [
        (f"ports/s >= 100x per-port perfquery ({per_port.ports_per_s:,.0f})", per_port, pps, 100),
        (f"ports/s >= 5x per-switch perfquery ({per_switch.ports_per_s:,.0f})", per_switch, pps, 5),
        (f"ports/s >= 50 % of minimal sender ({mini.ports_per_s:,.0f})", mini, pps, 0.5),
        (f"MADs/s >= 50 % of minimal sender ({mini.mads_per_s:,.0f})", mini, mps, 0.5),
    ]
    out = [
        f"Targets on the largest fabric ({result['size']}, {result['targets']} ports): "
        f"ratio of medians (median of per-round ratios in brackets); native at its best "
        f"window ({modes[0].setting} data-only, {modes[1].setting} with XmitWait), minimal "
        f"sender at {mini.setting}:",
        "",
        "| target | native data-only | native + XmitWait |",
        "|---|---|---|",
    ]
    for text, ref, key, goal in checks:
        cells = []
        for m in modes:
            mine, theirs = m.med(key), ref.med(key)
            ratio, rounds = mine / theirs, _per_round(m, ref, key)
            if goal < 1:
                shown = f"{ratio:.1%} ({rounds:.1%})"
            else:
                shown = f"{ratio:,.1f}x ({rounds:,.1f}x)"
            verdict = "met" if ratio >= goal else "NOT met"
            cells.append(f"{verdict}: {mine:,.0f} = {shown}")
        out.append(f"| {text} | " + " | ".join(cells) + " |")
    return out


def _default_tmpdir() -> Path | None:
    shm = Path("/dev/shm")  # noqa: S108 - only the parent of a private mkdtemp directory
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    info = machine()
    info["code"] = code_digest()
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
            print("\n" + "\n".join(table(result)), flush=True)
            if result.get("profile"):
                print("\n```\n" + result["profile"] + "```", flush=True)
    if code_digest() != info["code"]:
        print(f"\nWarning: {', '.join(CODE)} changed during the run", flush=True)
    if results:
        largest = max(results, key=lambda r: r["targets"])
        print("\n" + "\n".join(targets_check(largest)), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "sizes": results}, indent=1) + "\n")
    return 0 if len(results) == len(sizes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
