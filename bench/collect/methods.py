"""The collection methods :mod:`bench.collect.bench` compares and the record of one timed
run: the methods' names and settings, the minimal sender, and the perfquery processes.

:class:`MinimalSender` and the perfquery processes are collectors of their own, beside the
``Backend`` implementations of :mod:`ibqos.collect` (``NativeBackend``,
``PerfqueryBackend``) that the benchmark times with them."""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ibqos.collect.perfquery_parse import parse_perfquery
from ibqos.errors import MadError
from ibqos.fabric.targets import Target
from ibqos.mad import pma
from ibqos.mad.umad import UmadPort

WINDOWS = (1, 2, 4, 8)
WORKERS = 6  # ibsim: 10 clients at most; OpenSM and the child take two
PQ_TIMEOUT_S = 30.0

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
class PerfqueryJob:
    """One perfquery process: its command line, and which target ports it should print."""

    argv: tuple[str, ...]
    lid: int
    want: frozenset[int]
    smps: int  # SMPs it sends before its PMA Gets (NodeInfo, SwitchInfo for -l 255)


def run_job(job: PerfqueryJob) -> tuple[int, int]:
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


def per_port_jobs(targets: Sequence[Target]) -> list[PerfqueryJob]:
    return [
        PerfqueryJob(("perfquery", "-x", str(t.lid), str(t.port)), t.lid, frozenset([t.port]), 0)
        for t in targets
    ]


def per_switch_jobs(targets: Sequence[Target]) -> list[PerfqueryJob]:
    """``-l LID 255`` per switch, then ``LID PORT`` per CA port (no AllPortSelect there)."""
    by_lid: dict[int, set[int]] = {}
    for t in targets:
        if t.is_switch:
            by_lid.setdefault(t.lid, set()).add(t.port)
    jobs = [
        PerfqueryJob(("perfquery", "-x", "-l", str(lid), "255"), lid, frozenset(ports), 2)
        for lid, ports in by_lid.items()
    ]
    return jobs + per_port_jobs([t for t in targets if not t.is_switch])
