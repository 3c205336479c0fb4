"""How ``ibqos collect`` prints a rates table: aligned text, JSON or CSV.

JSON is a list of row objects (keys and units in :mod:`ibqos.collect.rates`; ``node_guid``
as a ``0x%016x`` string, NaN as null).  With several tables (``--count``), each is one line
(JSON Lines).  CSV has a header and the same keys as the JSON.  Both carry every column of
the rates table, so the per-VL ``vl<n>_xmit_wait_per_s`` keys appear exactly when the
sweep read them (``collect.vl_xmit_wait``); the aligned text leaves those 16 out to stay
readable.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pandas as pd

from ibqos.collect.rates import rows_for_json

FORMATS = ("table", "json", "csv")


def render(rates: pd.DataFrame, fmt: str) -> str:
    """The rates table in *fmt* ("table", "json" or "csv"), ending with a newline."""
    rows = rows_for_json(rates)
    if fmt == "json":
        return json.dumps(rows, separators=(",", ":")) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        return buf.getvalue()
    return _text(rows)


_TEXT_COLUMNS = (
    ("node_desc", "NODE", "<"),
    ("port", "PORT", ">"),
    ("lid", "LID", ">"),
    ("level", "LVL", ">"),
    ("role", "ROLE", "<"),
    ("xmit_bytes_per_s", "XMIT MB/s", ">"),
    ("rcv_bytes_per_s", "RCV MB/s", ">"),
    ("xmit_wait_per_s", "WAIT/s", ">"),
    ("reset", "RESET", "<"),
    ("error", "ERROR", "<"),
)


def _cell(key: str, value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key.endswith("bytes_per_s"):
        return f"{float(value) / 1e6:.2f}"  # type: ignore[arg-type]
    if key == "xmit_wait_per_s":
        return f"{float(value):.0f}"  # type: ignore[arg-type]
    if key == "reset":
        return "reset" if value else ""
    return str(value)


def _text(rows: list[dict[str, object]]) -> str:
    cells = [[h for _, h, _ in _TEXT_COLUMNS]]
    cells += [[_cell(k, r.get(k)) for k, _, _ in _TEXT_COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_TEXT_COLUMNS))]
    lines = []
    for row in cells:
        parts = [
            f"{c:{align}{w}}"
            for c, w, (_, _, align) in zip(row, widths, _TEXT_COLUMNS, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"
