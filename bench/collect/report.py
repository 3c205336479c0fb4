"""The tables :mod:`bench.collect.bench` prints: one per fabric size with its window curve, and
the check of the targets on the largest fabric."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.collect.methods import (
    BACKEND,
    MINIMAL,
    NATIVE,
    NATIVE_XW,
    PER_PORT,
    PER_SWITCH,
    WORKERS,
    Run,
)
from bench.report import head, row, table


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


def size_tables(result: dict[str, Any]) -> list[str]:
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
        *head(
            [
                "method",
                "window/workers",
                "ports timed",
                "ports/s",
                "MADs/s",
                "sweep s",
                "CPU s",
                "ibsim CPU s",
                "vs per-port perfquery",
                "vs per-switch perfquery",
                "vs minimal sender",
            ]
        ),
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
    for method_row in shown:
        asked = method_row.runs[0].asked
        timed = f"{asked}" if asked == n else f"{asked} (random sample)"
        bad = max(r.asked - r.ports for r in method_row.runs)
        if bad:
            timed += f", up to {bad:.0f} not read"
        if len(method_row.runs) == 1:
            timed += ", 1 round"
        pps = method_row.ports_per_s
        cells = [
            method_row.method,
            method_row.setting,
            timed,
            f"{pps:,.0f} ({method_row.best_ports_per_s:,.0f})",
            f"{method_row.mads_per_s:,.0f}",
            f"{method_row.med(lambda r: r.sweep_s):.2f}",
            f"{method_row.med(lambda r: r.cpu_s):.2f}",
            f"{method_row.med(lambda r: r.ibsim_cpu_s):.2f}",
            f"{pps / ref_port:,.1f}x",
            f"{pps / ref_switch:,.2f}x",
            f"{pps / ref_min:.0%}",
        ]
        out.append(row(cells))
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
    ]
    windows = sorted({int(s.split()[1]) for m, s in rows if m == MINIMAL})
    curve = []
    for w in windows:
        a, b, c = (rows[(m, f"window {w}")] for m in (NATIVE, NATIVE_XW, MINIMAL))
        curve.append(
            [
                str(w),
                f"{a.ports_per_s:,.0f} ({a.mads_per_s:,.0f})",
                f"{b.ports_per_s:,.0f} ({b.mads_per_s:,.0f})",
                f"{c.ports_per_s:,.0f} ({c.mads_per_s:,.0f})",
                f"{a.ports_per_s / c.ports_per_s:.0%}",
                f"{b.mads_per_s / c.mads_per_s:.0%}",
            ]
        )
    columns = [
        "window",
        NATIVE,
        NATIVE_XW,
        MINIMAL,
        "data-only / minimal",
        "+ XmitWait / minimal (MADs/s)",
    ]
    return out + table(columns, curve)


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
        *head(["target", NATIVE, NATIVE_XW]),
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
        out.append(row([text, *cells]))
    return out
