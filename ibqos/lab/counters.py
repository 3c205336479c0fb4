"""The lab's counters in ibsim: the traffic model's totals written with PerformanceSet,
and the ground truth of each tick.

ibsim keeps a PMA per port; its console's ``PerformanceSet "NODE"[PORT] Attr.Field=VALUE``
sets one counter.  The lab writes only what changed since it last wrote a port, so a tick
costs lines in proportion to the ports that carry traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ibqos.fabric.topology import Port
from ibqos.lab.readback import ReadBack
from ibqos.lab.traffic import TrafficModel

__all__ = ["EXT", "FIELDS", "MIRRORS", "changed_lines", "clear_lines", "perfset", "truth"]

#: PortCountersExtended fields the model drives, in the order of TrafficModel.totals().
FIELDS = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")
#: the attribute those fields belong to
EXT = "PortCountersExtended"
#: Unicast packet counters mirror the packet counters: all modelled traffic is unicast.
MIRRORS = {"PortXmitPkts": "PortUnicastXmitPkts", "PortRcvPkts": "PortUnicastRcvPkts"}


def perfset(port: Port, field: str, value: int) -> str:
    """The ibsim console line that sets *field* (``Attribute.Field``) of *port*."""
    return f'PerformanceSet "{port.node}"[{port.num}] {field}={value}'


def clear_lines(ports: Sequence[Port]) -> list[str]:
    """The lines that set every modelled counter of *ports* to zero."""
    names = [*FIELDS, *MIRRORS.values()]
    return [perfset(p, f"{EXT}.{f}", 0) for p in ports for f in names]


def changed_lines(
    model: TrafficModel,
    written: dict[Port, tuple[int, ...]],
    written_wait: dict[Port, dict[str, int]],
) -> list[str]:
    """The lines that bring ibsim's counters to the model's totals.

    Args:
        model: the traffic model, after its tick.
        written: per port, the data and packet counters last written (in FIELDS order);
            updated to the model's totals.
        written_wait: per port, the XmitWait counters last written; updated likewise.
    """
    lines: list[str] = []
    for port in model.router.ports:
        values = model.totals(port)
        old = written.get(port, (0, 0, 0, 0))
        for field, new, prev in zip(FIELDS, values, old, strict=True):
            if new != prev:
                lines += [
                    perfset(port, f"{EXT}.{f}", new)
                    for f in (field, MIRRORS.get(field))
                    if f is not None
                ]
        written[port] = values
    # XmitWait of overloaded ports (only those ever overloaded have any)
    for i in np.flatnonzero(model.xmit_wait).tolist():
        port = model.router.ports[i]
        waits, seen = model.wait_counters(port), written_wait.get(port, {})
        lines += [perfset(port, f, v) for f, v in waits.items() if v != seen.get(f, 0)]
        written_wait[port] = waits
    return lines


def truth(
    model: TrafficModel, readback: ReadBack | None, ticks: int, lines_last_tick: int
) -> dict[str, Any]:
    """Ground truth: per job, bytes sent across each fat-tree level (index 0 = hosts),
    iterations finished and iterations per second over the progress window; with
    fluid contention (a *readback*) also each job's SL and VL and the QoS setup read back.

    Args:
        model: the traffic model.
        readback: the QoS setup read from the fabric (fluid contention), or None.
        ticks: ticks done so far.
        lines_last_tick: PerformanceSet lines the last tick wrote.
    """
    jobs = {
        **{jid: (j, False) for jid, j in model.finished.items()},
        **{jid: (j, True) for jid, j in model.jobs.items()},
    }
    arb = model.arbitration
    out: dict[str, Any] = {
        "time_s": model.time,
        "ticks": ticks,
        "lines_last_tick": lines_last_tick,
        "levels": model.uplink_levels + 1,
        "contention": model.contention,
        "progress_window_s": model.window_s,
        "jobs": {},
    }
    for jid, (j, running) in jobs.items():
        entry: dict[str, Any] = {
            "running": running,
            "level_bytes": [float(x) for x in j.truth],
            "level_bytes_per_s": [float(x) for x in j.last_rate],
            "iterations": j.iterations,
            "iterations_per_second": j.progress.rate() if running else 0.0,
        }
        if arb is not None and running:
            entry["sl"] = arb.job_sl.get(jid, 0)
            entry["vl"] = arb.vl_of(jid)
        out["jobs"][jid] = entry
    if readback is not None:
        out["qos"] = readback.setup.to_dict()
        out["qos_reads"] = {"reads": readback.reads, "failures": readback.failures}
    return out
