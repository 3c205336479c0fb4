"""Sweep recordings made by hand, for the replay backend."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Sweep, empty_table
from ibqos.fabric.model import Fabric


def recorded(path: Path, fabric: Fabric, sweeps: int) -> None:
    """A recording of *sweeps* sweeps, one second apart, every port moving 1 MB/s."""
    targets = fabric.targets()
    rec = SweepRecorder(path)
    for k in range(sweeps):
        table = empty_table(targets)
        for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait"):
            table[col] = pd.array([k * 1_000_000] * len(targets), dtype="UInt64")
        table["time_s"] = 1000.0 + k
        table["counter_bits"] = pd.Series([64] * len(targets), dtype="uint8")
        table["error"] = ""
        rec.record(Sweep(targets, table, "native", 1000.0 + k, 0.01))
