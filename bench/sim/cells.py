"""The cells of the evaluation's and the validation's tables, as text (the tables themselves
are :mod:`bench.report`'s)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from bench.sim.run import CLEAN_S
from ibqos.jobs.model import Job
from ibqos.sim.evaluate import Outcome
from ibqos.sim.qos import Arbitration
from ibqos.sim.report import buffers_text


def ms(x: float) -> str:
    """Seconds as milliseconds, two decimals."""
    return f"{x * 1e3:.2f}"


def eff(base: float, x: float) -> str:
    """E, *base* over *x* (``inf``: *x* has no contention, ``-``: neither has)."""
    if x <= CLEAN_S:
        return "inf" if base > CLEAN_S else "-"
    return f"{base / x:.2f}"


def pct(x: float) -> str:
    """A share as a signed percentage."""
    return "inf" if math.isinf(x) else f"{x * 100:+.1f} %"


def pts(x: float) -> str:
    """A difference of shares, in signed points (1.0 = 100 points)."""
    return "inf" if math.isinf(x) else f"{x * 100:+.1f} pts"


def share_text(x: float | None) -> str:
    """A share as a percentage, or a dash for none."""
    return "-" if x is None else f"{x:.0%}"


def geomean(xs: Sequence[float]) -> float:
    """The geometric mean (nan for none)."""
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else math.nan


def setup_text(arb: Arbitration, jobs: Sequence[Job]) -> str:
    """Which lane every job is on and each lane's packets per round."""
    packets = arb.low_packets()
    lanes: dict[int, list[str]] = {}
    for j in jobs:
        lanes.setdefault(arb.vl_of(j.id), []).append(j.id)
    return ", ".join(
        f"VL{vl}[{'+'.join(ids)}]:{packets.get(vl, 0)}" for vl, ids in sorted(lanes.items())
    )


def buffers_used(outcomes: Iterable[Outcome]) -> str:
    """The switch buffers the runs of *outcomes* had, as the reports say them."""
    return ", ".join(buffers_text(n) for n in sorted({o.buffer_packets for o in outcomes})) or "-"
