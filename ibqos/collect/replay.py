"""Record sweeps to a directory and replay them as a counter backend.

A recording is a directory that people can read with ``less`` and a spreadsheet::

    DIR/
      recording.json      the index: format, version, columns, one entry per sweep
      sweep-000001.csv    the first sweep: one row per target
      sweep-000002.csv    ...

``recording.json`` (format version 1)::

    {
     "format": "ibqos-sweep-recording",
     "version": 1,
     "columns": ["node_guid", "node_desc", ..., "error"],
     "sweeps": [
      {"file": "sweep-000001.csv", "backend": "perfquery", "started_s": 1795306843.52,
       "duration_s": 0.47, "cpu_s": 0.53, "stats": {"sent": 27, "failed": 1}, "rows": 27}
     ]
    }

Each CSV (RFC 4180, UTF-8, ``\\n`` line ends, a header line) holds the sweep's targets and
its table side by side, in the columns listed in ``CSV_COLUMNS``:

=============  =========================================================================
column         written as
=============  =========================================================================
node_guid      ``0x`` and 16 hex digits
node_desc      text (quoted when it holds a comma, quote or line break)
port           decimal
lid            decimal
level          decimal
role           ``host``, ``down`` or ``up``
is_switch      ``true`` or ``false``
time_s         the shortest decimal that reads back as the same float; empty for NaN
xmit_bytes     decimal, bytes; empty when missing (<NA>); likewise the counters below
rcv_bytes      decimal, bytes
xmit_pkts      decimal, packets
rcv_pkts       decimal, packets
xmit_wait      decimal, ticks
counter_bits   decimal (64, 32 or 0)
error          text; empty when the port was read
=============  =========================================================================

A sweep read with ``collect.vl_xmit_wait`` on has 16 more columns after ``error``,
``vl_xmit_wait0`` .. ``vl_xmit_wait15`` (``VL_CSV_COLUMNS``): decimal ticks, 0 to 65535,
empty when missing.  Each CSV's header says which of the two column lists it has, so one
recording may hold both (the option was turned on between two runs); the index lists the
longer one as soon as any sweep has the per-VL columns.  Recordings made before these
columns existed are read as they are; an ibqos that predates them rejects a recording
that has them (``columns: expected [...]``) rather than dropping them unnoticed.

So a replayed sweep has exactly the recorded table, dtypes and all, and the recorded
targets, backend name, times and stats.  Every file is written with
:func:`ibqos.fsio.atomic_write`, the CSV before the index, so a crash leaves at worst an
unlisted CSV that the next recording overwrites.  The index is rewritten on every sweep,
which is fine for the hours of sweeps a test or a bug report needs.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ibqos.collect.sweep import (
    COUNTERS,
    SWEEP_DTYPES,
    VL_WAIT_COLUMNS,
    Sweep,
    empty_table,
    has_vl_wait,
    sweep_dtypes,
)
from ibqos.errors import CollectError, RecordingExhausted
from ibqos.fabric.targets import Target
from ibqos.fsio import atomic_write

__all__ = [
    "CSV_COLUMNS",
    "FORMAT",
    "INDEX",
    "VERSION",
    "VL_CSV_COLUMNS",
    "ReplayBackend",
    "SweepRecorder",
]

FORMAT = "ibqos-sweep-recording"
VERSION = 1
INDEX = "recording.json"
TARGET_COLUMNS = ("node_guid", "node_desc", "port", "lid", "level", "role", "is_switch")
CSV_COLUMNS: tuple[str, ...] = (
    *TARGET_COLUMNS,
    *(c for c in SWEEP_DTYPES if c not in TARGET_COLUMNS),
)
#: The columns of a sweep that has the per-VL transmit-wait counters.
VL_CSV_COLUMNS: tuple[str, ...] = (*CSV_COLUMNS, *VL_WAIT_COLUMNS)
NOT_RECORDED = "not in recording"
_SWEEP_FILE = re.compile(r"sweep-[0-9]{6,}\.csv")
_ROLES = ("host", "down", "up")
_UINT = re.compile(r"[0-9]+")
#: Largest value of each bounded integer column.
_LIMITS = {
    "port": 0xFF,
    "lid": 0xFFFF,
    "level": 0xFF,
    "counter_bits": 0xFF,
    **{c: 0xFFFF for c in VL_WAIT_COLUMNS},  # PortVLXmitWait counters are 16 bits wide
}
#: counters that may be empty (missing) in a CSV
_NULLABLE = frozenset((*COUNTERS, *VL_WAIT_COLUMNS))
_U64_MAX = 2**64 - 1


class SweepRecorder:
    """Appends sweeps to a recording directory (created if missing).

    Recording into a directory that already holds a recording continues it.

    Raises:
        CollectError: the directory holds a recording this version cannot read.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        index = self.dir / INDEX
        self._sweeps: list[dict[str, Any]] = []
        self._columns = CSV_COLUMNS
        if index.exists():
            self._sweeps, self._columns = _load_index(index)

    @property
    def count(self) -> int:
        """Number of sweeps recorded so far."""
        return len(self._sweeps)

    def record(self, sweep: Sweep) -> Path:
        """Write *sweep* as the next CSV and list it in the index; return the CSV's path.

        Raises:
            ValueError: the sweep's table does not match its targets.
        """
        _check_sweep(sweep)
        if has_vl_wait(sweep.table):
            self._columns = VL_CSV_COLUMNS  # the index lists every column any CSV has
        name = f"sweep-{len(self._sweeps) + 1:06d}.csv"
        path = self.dir / name
        atomic_write(path, _to_csv(sweep))
        entry = {
            "file": name,
            "backend": sweep.backend,
            "started_s": sweep.started_s,
            "duration_s": sweep.duration_s,
            "cpu_s": sweep.cpu_s,
            "stats": dict(sweep.stats),
            "rows": len(sweep.table),
        }
        index = {
            "format": FORMAT,
            "version": VERSION,
            "columns": list(self._columns),
            "sweeps": [*self._sweeps, entry],
        }
        atomic_write(self.dir / INDEX, json.dumps(index, indent=1) + "\n")
        self._sweeps.append(entry)
        return path


class ReplayBackend:
    """Returns the sweeps of a recording, in order, as a counter backend.

    Args:
        directory: the recording.
        loop: start over after the last sweep instead of stopping.  The counters then go
            back to their first values and the times go back too, so the first sweep of
            each new pass gives no rates (its interval is not positive).

    Targets: given none, a sweep is returned as recorded.  Given targets, its rows are
    those targets in their order, matched to recorded rows by (node GUID, port); a
    recorded port not among them is left out, and a target the sweep did not record gets
    a row with error "not in recording".

    Raises:
        CollectError: the directory holds no readable recording.
    """

    name = "replay"

    def __init__(self, directory: Path, loop: bool = False) -> None:
        self.dir = Path(directory)
        self.loop = loop
        self._sweeps, _ = _load_index(self.dir / INDEX)
        self._next = 0

    @property
    def count(self) -> int:
        """Number of sweeps in the recording."""
        return len(self._sweeps)

    def sweep(self, targets: Sequence[Target]) -> Sweep:
        """The next recorded sweep (see the class docstring for *targets*).

        Raises:
            RecordingExhausted: every sweep was returned (and *loop* is off).
            CollectError: the sweep's file is missing or garbled (naming the file, line
                and column).
        """
        if self._next >= len(self._sweeps):
            if not self.loop or not self._sweeps:
                raise RecordingExhausted(
                    f"recording {self.dir} exhausted after {len(self._sweeps)} sweeps"
                )
            self._next = 0
        entry = self._sweeps[self._next]
        self._next += 1
        recorded = _read_sweep(self.dir / entry["file"], entry)
        if not targets:
            return recorded
        return _select(recorded, list(targets))

    def close(self) -> None:
        """Nothing to release: each sweep's file is read and closed when it is replayed."""


# -- writing --------------------------------------------------------------------------
def _check_sweep(sweep: Sweep) -> None:
    table = sweep.table
    columns = list(sweep_dtypes(has_vl_wait(table)))
    if list(table.columns) != columns or len(table) != len(sweep.targets):
        raise ValueError("sweep table does not have one row per target in the sweep columns")
    guids, ports, lids = (table[c].tolist() for c in ("node_guid", "port", "lid"))
    keys = zip(guids, ports, lids, strict=True)
    for i, (t, row) in enumerate(zip(sweep.targets, keys, strict=True)):
        if row != (t.node_guid, t.port, t.lid):
            raise ValueError(f"sweep table row {i} is {row}, its target {t}")


def _to_csv(sweep: Sweep) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    vl = VL_WAIT_COLUMNS if has_vl_wait(sweep.table) else ()
    writer.writerow((*CSV_COLUMNS, *vl))
    columns = {c: sweep.table[c].tolist() for c in (*SWEEP_DTYPES, *vl)}
    for i, t in enumerate(sweep.targets):
        writer.writerow(
            [
                f"0x{t.node_guid:016x}",
                t.node_desc,
                t.port,
                t.lid,
                t.level,
                t.role,
                "true" if t.is_switch else "false",
                _float_text(columns["time_s"][i]),
                *(_uint_text(columns[c][i]) for c in COUNTERS),
                int(columns["counter_bits"][i]),
                str(columns["error"][i]),
                *(_uint_text(columns[c][i]) for c in vl),
            ]
        )
    return buf.getvalue()


def _float_text(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def _uint_text(value: Any) -> str:
    return "" if value is pd.NA or value is None else str(int(value))


# -- reading --------------------------------------------------------------------------
def _read_text(path: Path, missing: str) -> str:
    """A recording file's text; *missing* says what its absence means."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CollectError(f"{path}: not found{missing}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CollectError(f"{path}: cannot read: {err}") from err


def _load_index(path: Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The sweep entries of a recording's index, checked, and its column list."""
    text = _read_text(path, f": {path.parent} is not a sweep recording")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CollectError(f"{path}: line {err.lineno} column {err.colno}: {err.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CollectError(f'{path}: not an ibqos sweep recording (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise CollectError(
            f"{path}: recording version {data.get('version')!r}; this ibqos reads {VERSION}"
        )
    columns = data.get("columns")
    if columns not in (list(CSV_COLUMNS), list(VL_CSV_COLUMNS)):
        raise CollectError(
            f"{path}: columns: expected {list(CSV_COLUMNS)}, optionally followed by "
            f"{VL_WAIT_COLUMNS[0]} .. {VL_WAIT_COLUMNS[-1]}"
        )
    sweeps = data.get("sweeps")
    if not isinstance(sweeps, list):
        raise CollectError(f"{path}: sweeps: expected a list")
    for i, entry in enumerate(sweeps):
        _check_entry(entry, f"{path}: sweeps[{i}]")
    return sweeps, tuple(columns)


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise CollectError(f"{where}: expected an object")
    kinds: dict[str, tuple[type, ...]] = {
        "file": (str,),
        "backend": (str,),
        "started_s": (int, float),
        "duration_s": (int, float),
        "cpu_s": (int, float),
        "stats": (dict,),
        "rows": (int,),
    }
    for key, kind in kinds.items():
        value = entry.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CollectError(f"{where}.{key}: expected {kind[0].__name__}, got {value!r}")
    if not _SWEEP_FILE.fullmatch(entry["file"]):
        raise CollectError(f"{where}.file: expected sweep-NNNNNN.csv, got {entry['file']!r}")
    bad = [k for k, v in entry["stats"].items() if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        raise CollectError(f"{where}.stats.{bad[0]}: expected int")


def _read_sweep(path: Path, entry: dict[str, Any]) -> Sweep:
    text = _read_text(path, f" (listed in {INDEX})")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or tuple(header) not in (CSV_COLUMNS, VL_CSV_COLUMNS):
            raise CollectError(
                f"{path}: line 1: expected the header {','.join(CSV_COLUMNS)} "
                f"(optionally followed by {VL_WAIT_COLUMNS[0]}..{VL_WAIT_COLUMNS[-1]})"
            )
        columns = tuple(header)
        rows: list[tuple[int, list[str]]] = []
        while True:
            start = reader.line_num + 1  # a quoted field may span lines: name the first
            row = next(reader, None)
            if row is None:
                break
            rows.append((start, row))
    except csv.Error as err:
        raise CollectError(f"{path}: line {reader.line_num}: {err}") from None
    targets: list[Target] = []
    dtypes = sweep_dtypes(columns == VL_CSV_COLUMNS)
    cols: dict[str, list[Any]] = {c: [] for c in dtypes}
    for lineno, row in rows:
        if len(row) != len(columns):
            raise CollectError(
                f"{path}: line {lineno}: expected {len(columns)} fields, got {len(row)}"
            )
        values = dict(zip(columns, row, strict=True))
        parsed = {c: _parse(c, v, f"{path}: line {lineno}, column {c}") for c, v in values.items()}
        targets.append(
            Target(
                node_guid=parsed["node_guid"],
                node_desc=parsed["node_desc"],
                port=parsed["port"],
                lid=parsed["lid"],
                level=parsed["level"],
                role=parsed["role"],
                is_switch=parsed["is_switch"],
            )
        )
        for c in dtypes:
            cols[c].append(parsed[c])
    if len(targets) != entry["rows"]:
        raise CollectError(f"{path}: {len(targets)} rows, but {INDEX} lists {entry['rows']}")
    return Sweep(
        targets=targets,
        table=pd.DataFrame(cols).astype(dtypes),
        backend=entry["backend"],
        started_s=float(entry["started_s"]),
        duration_s=float(entry["duration_s"]),
        cpu_s=float(entry["cpu_s"]),
        stats=dict(entry["stats"]),
    )


def _parse(column: str, text: str, where: str) -> Any:
    """One CSV field as the Python value of its column."""
    if column in ("node_desc", "error"):
        return text
    if column == "role":
        if text not in _ROLES:
            raise CollectError(f"{where}: expected one of {', '.join(_ROLES)}, got {text!r}")
        return text
    if column == "is_switch":
        if text not in ("true", "false"):
            raise CollectError(f"{where}: expected true or false, got {text!r}")
        return text == "true"
    if column == "time_s":
        if text == "":
            return float("nan")
        try:
            return float(text)
        except ValueError:
            raise CollectError(f"{where}: expected a number, got {text!r}") from None
    if column == "node_guid":
        if not re.fullmatch(r"0x[0-9a-fA-F]{1,16}", text):
            raise CollectError(f"{where}: expected 0x and up to 16 hex digits, got {text!r}")
        return int(text, 16)
    if column in _NULLABLE and text == "":
        return pd.NA
    if not _UINT.fullmatch(text):
        raise CollectError(f"{where}: expected an unsigned integer, got {text!r}")
    value = int(text)
    limit = _LIMITS.get(column, _U64_MAX)
    if value > limit:
        raise CollectError(f"{where}: {value} is larger than {limit}")
    return value


def _select(recorded: Sweep, targets: list[Target]) -> Sweep:
    """The rows of *recorded* for *targets*, in their order."""
    where: dict[tuple[int, int], int] = {}
    for i, t in enumerate(recorded.targets):
        where.setdefault((t.node_guid, t.port), i)
    picks = [where.get((t.node_guid, t.port)) for t in targets]
    vl_wait = has_vl_wait(recorded.table)
    blank = empty_table(targets, vl_wait=vl_wait)
    dtypes = sweep_dtypes(vl_wait)
    cols: dict[str, list[Any]] = {}
    for col in dtypes:
        have = recorded.table[col].tolist()
        default = blank[col].tolist()
        if col in ("node_guid", "port", "lid"):
            cols[col] = default  # the caller's targets
        elif col == "error":
            cols[col] = [NOT_RECORDED if p is None else have[p] for p in picks]
        else:
            cols[col] = [default[i] if p is None else have[p] for i, p in enumerate(picks)]
    return Sweep(
        targets=targets,
        table=pd.DataFrame(cols).astype(dtypes),
        backend=recorded.backend,
        started_s=recorded.started_s,
        duration_s=recorded.duration_s,
        cpu_s=recorded.cpu_s,
        stats=dict(recorded.stats),
    )
