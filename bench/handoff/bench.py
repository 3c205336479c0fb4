"""Benchmark the job-SL server under a burst of questions: the event loop against the
threaded server it replaced.

Usage: python -m bench.handoff.bench [--clients 2000,10000] [--procs 4] [--bound 3]

A big job's start is a burst: every task's TaskProlog asks for the job's SL at once.  Per
case, ``--clients`` askers connect at the same moment (non-blocking sockets, spread over
``--procs`` client processes, :mod:`bench.handoff.child`) and each asks once for a job
whose SL is in force, on loopback TCP (``agent.sl_listen``) and on the UNIX socket
(``agent.socket``).  An asker's latency runs from its connect() to the last byte of its
answer; an answer counts as in time when it says ``OK`` within ``--bound`` seconds (the
TaskProlog's default bound).  A UNIX connect refused for a full queue (EAGAIN) is retried
every 10 ms, as a blocking connect would wait; a TCP SYN dropped by a full queue is the
kernel's to retry (1 s, 3 s).

The two servers, run one after the other in this process:

- ``event loop``: :class:`ibqos.agent.handoff.SlServer` of this tree (one thread, a
  listen queue as long as net.core.somaxconn allows);
- ``threaded (875a502)``: the same class as of commit 875a502, loaded from
  ``git show 875a502:ibqos/agent/handoff.py`` into a temporary module (socketserver's
  thread per question, listen queue of 5).

Prints one table (markdown) and the machine; docs/slurm.md holds one run.  Wall-clock
times on a shared 2-core machine: the clients and the server share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import ibqos
from bench import ROOT, child_env
from bench.handoff.child import GIVE_UP_S
from bench.machine import machine
from bench.report import head, row, say
from ibqos.agent import handoff

BASELINE = "875a502"
JOB = "4242"
SL = 5
COLUMNS = (
    "clients",
    "transport",
    "server",
    "answered OK",
    "within bound",
    "p50 s",
    "p90 s",
    "p99 s",
    "max s",
    "other replies",
)


def load_baseline() -> types.ModuleType:
    """``ibqos/agent/handoff.py`` as of :data:`BASELINE`, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:ibqos/agent/handoff.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = f"ibqos_handoff_{BASELINE}"
    module = types.ModuleType(name)
    module.__file__ = f"{BASELINE}:ibqos/agent/handoff.py"
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own code
    return module


def burst(target: str, clients: int, procs: int, bound: float) -> dict[str, Any]:
    """*clients* askers from *procs* processes at once; their latencies and replies."""
    start_at = time.time() + 1.5  # every child imported and ready
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    child = [sys.executable, "-m", "bench.handoff.child", target]
    kids = [
        subprocess.Popen(
            [*child, str(n), repr(start_at), str(bound), JOB],
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for n in shares
    ]
    latencies: list[float] = []
    replies: dict[str, int] = {}
    for kid in kids:
        out, _ = kid.communicate(timeout=GIVE_UP_S + 30)
        got = json.loads(out)
        latencies += got["latencies"]
        for word, n in got["replies"].items():
            replies[word] = replies.get(word, 0) + n
    return {"latencies": sorted(latencies), "replies": replies}


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run_case(module: Any, transport: str, clients: int, procs: int, bound: float) -> list[str]:
    """One burst against *module*'s server: the table's cells from "answered OK" on."""
    board = module.SlBoard()
    board.publish({JOB: SL}, [JOB])
    board.round_done(time.monotonic() + 3600)  # every question is about a read already done
    with tempfile.TemporaryDirectory(prefix="bench_handoff.") as tmp:
        path = Path(tmp) / "sl.sock"
        if transport == "unix":
            server = module.SlServer(board, path)
            target = str(path)
        else:
            server = module.SlServer(board, None, ("127.0.0.1", 0))
            target = f"tcp:{server.tcp_address[0]}:{server.tcp_address[1]}"
        try:
            got = burst(target, clients, procs, bound)
        finally:
            server.close()
    lat = got["latencies"]
    in_time = sum(1 for t in lat if t <= bound)
    others = {w: n for w, n in got["replies"].items() if w != "OK" and n}
    cells = [f"{quantile(lat, q):.3f}" for q in (0.5, 0.9, 0.99)]
    cells.append(f"{lat[-1]:.3f}" if lat else "-")
    note = ", ".join(f"{w} {n}" for w, n in sorted(others.items())) or "-"
    return [str(len(lat)), str(in_time), *cells, note]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.handoff.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--clients", default="2000,10000", help="comma-separated burst sizes")
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--bound", type=float, default=3.0, help="seconds an asker waits")
    parser.add_argument("--transports", default="tcp,unix", help="tcp, unix or both")
    parser.add_argument(
        "--servers", default="new,baseline", help="new (this tree), baseline or both"
    )
    args = parser.parse_args()
    servers: list[tuple[str, Any]] = []
    if "new" in args.servers.split(","):
        servers.append(("event loop", handoff))
    if "baseline" in args.servers.split(","):
        servers.append((f"threaded ({BASELINE})", load_baseline()))
    somaxconn = Path("/proc/sys/net/core/somaxconn").read_text().strip()
    print(f"ibqos {ibqos.__version__}+dev; {machine()}")
    print(
        f"net.core.somaxconn {somaxconn}; {args.procs} client processes; bound {args.bound:g} s;"
        f" load average {os.getloadavg()[0]:.2f} at the start"
    )
    print()
    print("\n".join(head(COLUMNS, "rllrrrrrrl", spaced=True)))
    for clients in (int(n) for n in args.clients.split(",")):
        for transport in args.transports.split(","):
            for name, module in servers:
                say(f"{clients} clients, {transport}, {name}")
                cells = run_case(module, transport, clients, args.procs, args.bound)
                print(row([str(clients), transport, name, *cells]), flush=True)


if __name__ == "__main__":
    main()
