"""Characterizations as tables (text, CSV, JSON) and plots (PNG or SVG, matplotlib).

One row per placement and level: ``placement, nodes, leaves, level, bytes_per_s,
peak_bytes_per_s, avail_bytes_per_s, util, peak_util, intensity, class`` (bytes per
second, fractions; empty/null where not defined: the top level has no uplinks).  Plots:

- ``levels``: per-level mean injection (bytes/s) and utilization by placement;
- ``spread``: available bandwidth per level (and utilization) by placement ``F<n>``, with
  the number of leaf switches it spans, for one job size.

Everything is rendered in memory first; :func:`write_outputs` then writes each file
atomically, so a failure leaves no half-written output.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ibqos.characterize.extra import extra_module
from ibqos.classify.levels import Characterization
from ibqos.fsio import atomic_write_bytes
from ibqos.plan.output import align, pct_text, rate_text  # as `ibqos plan` prints them

COLUMNS = (
    "placement",
    "nodes",
    "leaves",
    "level",
    "bytes_per_s",
    "peak_bytes_per_s",
    "avail_bytes_per_s",
    "util",
    "peak_util",
    "intensity",
    "class",
)
PLOT_FORMATS = ("png", "svg")


def rows(chars: Sequence[Characterization]) -> list[dict[str, Any]]:
    """The table rows (see the module docstring)."""
    out = []
    for c in chars:
        for r in c.levels:
            out.append(
                {
                    "placement": c.placement,
                    "nodes": len(c.hosts),
                    "leaves": c.leaves,
                    "level": r.level,
                    "bytes_per_s": r.bytes_per_s,
                    "peak_bytes_per_s": r.peak_bytes_per_s,
                    "avail_bytes_per_s": r.avail_bytes_per_s,
                    "util": r.util,
                    "peak_util": r.peak_util,
                    "intensity": c.intensity,
                    "class": c.cls,
                }
            )
    return out


def to_csv(table: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV with a header; None is an empty field."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in table:
        w.writerow({k: "" if row[k] is None else row[k] for k in COLUMNS})
    return out.getvalue()


def summary(chars: Sequence[Characterization]) -> list[dict[str, Any]]:
    """One object per placement, levels nested: what the JSON output and a profile's
    ``characterized`` list hold."""
    return [
        {
            "placement": c.placement,
            "nodes": len(c.hosts),
            "leaves": c.leaves,
            "hosts": _hosts_text(c.hosts),
            "intensity": _round(c.intensity),
            "peak_intensity": _round(c.peak_intensity),
            "level": c.level,
            "class": c.cls,
            "levels": {
                r.level: {
                    "bytes_per_s": _round(r.bytes_per_s),
                    "avail_bytes_per_s": _round(r.avail_bytes_per_s),
                    "util": None if r.util is None else _round(r.util),
                }
                for r in c.levels
            },
        }
        for c in chars
    ]


def to_json(doc: Mapping[str, Any]) -> str:
    """JSON text (levels as string keys, as JSON needs)."""
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def text_table(chars: Sequence[Characterization]) -> str:
    """An aligned table: one line per placement, rate and utilization per level >= 1."""
    if not chars:
        return "nothing characterized\n"
    levels = [r.level for r in chars[0].levels if r.level >= 1 and r.avail_bytes_per_s > 0]
    header = ["PLACEMENT", "NODES", "LEAVES", "L0 rate"]
    header += [f"L{lv} rate/avail/util" for lv in levels]
    header += ["INTENSITY", "PEAK", "CLASS"]
    body = []
    for c in chars:
        by = {r.level: r for r in c.levels}
        cells = [c.placement, str(len(c.hosts)), str(c.leaves), rate_text(by[0].bytes_per_s)]
        for lv in levels:
            r = by[lv]
            cells.append(
                f"{rate_text(r.bytes_per_s)} / {rate_text(r.avail_bytes_per_s)} {pct_text(r.util)}"
            )
        cells += [pct_text(c.intensity), pct_text(c.peak_intensity), c.cls]
        body.append(cells)
    return "\n".join(align(header, body)) + "\n"


def plot_levels(chars: Sequence[Characterization], title: str, fmt: str = "png") -> bytes:
    """Per-level mean injection (bytes/s) and utilization, one bar per placement."""
    plt = _pyplot()
    levels = [r.level for r in chars[0].levels if r.avail_bytes_per_s > 0] if chars else []
    fig, (ax_rate, ax_util) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(len(chars), 1)
    for i, c in enumerate(chars):
        by = {r.level: r for r in c.levels}
        xs = [lv + (i - (len(chars) - 1) / 2) * width for lv in levels]
        ax_rate.bar(xs, [by[lv].bytes_per_s for lv in levels], width, label=c.placement)
        ax_util.bar(xs, [by[lv].util or 0.0 for lv in levels], width, label=c.placement)
    for ax, label in ((ax_rate, "injection (bytes/s)"), (ax_util, "utilization (rate / avail)")):
        ax.set_xticks(levels, [f"L{lv}" for lv in levels])
        ax.set_xlabel("fat-tree level")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    ax_util.legend(fontsize="small")
    fig.suptitle(title)
    return _render(plt, fig, fmt)


def plot_spread(chars: Sequence[Characterization], title: str, fmt: str = "png") -> bytes:
    """Available bandwidth (bytes/s) and utilization per level >= 1 by placement (and
    leaf switches spanned), for placements of one job size."""
    plt = _pyplot()
    ordered = sorted(chars, key=lambda c: c.leaves)
    fig, (ax_avail, ax_util) = plt.subplots(1, 2, figsize=(11, 4.2))
    levels = sorted(
        {r.level for c in ordered for r in c.levels if r.level >= 1 and r.avail_bytes_per_s > 0}
    )
    # one point per placement: F7 (7 + 1) and F4 (4 + 4) span the same leaves and differ
    x = list(range(len(ordered)))
    ticks = [f"{c.placement}\n{c.leaves}" for c in ordered]
    for lv in levels:
        by = [{r.level: r for r in c.levels}[lv] for c in ordered]
        ax_avail.plot(x, [r.avail_bytes_per_s for r in by], marker="o", label=f"L{lv}")
        ax_util.plot(x, [r.util or 0.0 for r in by], marker="o", label=f"L{lv}")
    for ax, label in ((ax_avail, "available bandwidth (bytes/s)"), (ax_util, "utilization")):
        ax.set_xticks(x, ticks)
        ax.set_xlabel("placement / leaf switches spanned")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    nodes = len(ordered[0].hosts) if ordered else 0
    fig.suptitle(f"{title}: {nodes} nodes spread over more leaf switches")
    return _render(plt, fig, fmt)


def write_outputs(directory: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write every file (name -> content) into *directory* atomically; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in files.items():
        path = directory / name
        atomic_write_bytes(path, data)
        paths.append(path)
    return paths


def _pyplot() -> Any:
    mpl = extra_module("matplotlib", "the plots")
    mpl.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _render(plt: Any, fig: Any, fmt: str) -> bytes:
    if fmt not in PLOT_FORMATS:
        raise ValueError(f"plot format {fmt!r}: expected one of {', '.join(PLOT_FORMATS)}")
    fig.tight_layout()
    buf = io.BytesIO()
    # no timestamps in the file: the same input gives the same bytes
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    fig.savefig(buf, format=fmt, dpi=100, metadata=meta)
    plt.close(fig)
    return buf.getvalue()


def _hosts_text(hosts: Sequence[str]) -> str:
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    return str(NodeSet.fromlist(hosts, resolver=RESOLVER_NOGROUP))


def _round(value: float) -> float:
    return float(f"{value:.6g}") if math.isfinite(value) else value
