"""After OpenSM re-read its files: check through SA that it serves what ibqos wrote.

OpenSM answers SA queries from what it computed in the heavy sweep (docs/design.md §6.5), so
three small ``saquery`` calls show whether the new files took effect:

- ``saquery SL2VL LID/IN/OUT``: the SL2VL table of one switch port pair;
- ``saquery VLAR LID/PORT/1``: the low VLArb table (block 1) of one switch port;
- ``saquery PR --slid A --dlid B``: the PathRecord SL between two ports of a job, which
  must be the job's SL (the policy's match rule for its port-group).

Each query names one record, so the reply fits one MAD (umad2sim cuts RMPP replies to the
first segment, docs/design.md §7.6).  A few jobs are checked per apply, not all: each query is a
process and a few tens of milliseconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ibqos.config.lanes import NUM_SLS, Entry
from ibqos.errors import IbqosError
from ibqos.fabric.model import Fabric
from ibqos.plan.planner import Plan

#: Runs a diag (argv) and returns its stdout; raises IbqosError on failure.
Runner = Callable[[Sequence[str]], str]

_SL = re.compile(r"^\s*sl\.+(0x[0-9a-fA-F]+|\d+)\s*$", re.M)
_ROW = re.compile(r"^\s*(VL|Weight)\s*:\s*((?:\s*\d+\s*\|)+)", re.M)


@dataclass(frozen=True)
class PathCheck:
    """A PathRecord that must carry a job's SL: between LIDs *slid* and *dlid*."""

    job_id: str
    slid: int
    dlid: int
    sl: int


@dataclass(frozen=True)
class Expected:
    """What OpenSM should serve after an apply.

    Attributes:
        sl2vl: the switch external ports' SL2VL (16 VLs); None: not checked.
        sl2vl_port: (switch LID, in port, out port) to read it on.
        vlarb_low: the low VLArb entries; None: not checked.
        vlarb_port: (switch LID, port) to read it on.
        paths: PathRecords to check.
    """

    sl2vl: tuple[int, ...] | None = None
    sl2vl_port: tuple[int, int, int] | None = None
    vlarb_low: tuple[Entry, ...] | None = None
    vlarb_port: tuple[int, int] | None = None
    paths: tuple[PathCheck, ...] = ()


def parse_path_sl(text: str) -> int:
    """The SL of a ``saquery PR`` reply; IbqosError when it has none (no path)."""
    m = _SL.search(text)
    if m is None:
        raise IbqosError("saquery PR: no PathRecord in the reply")
    return int(m.group(1), 0)


def parse_rows(text: str, name: str) -> list[int]:
    """All numbers of the ``name:`` rows (``VL`` or ``Weight``) of a SL2VL/VLArb dump."""
    out: list[int] = []
    for m in _ROW.finditer(text):
        if m.group(1) == name:
            out += [int(x) for x in m.group(2).split("|") if x.strip()]
    return out


def check(expected: Expected, run: Runner) -> list[str]:
    """Problems between *expected* and what SA serves, one line each (empty: all good)."""
    problems: list[str] = []

    def query(argv: Sequence[str]) -> str | None:
        try:
            return run(argv)
        except IbqosError as err:
            problems.append(f"{' '.join(argv)}: {err}")
            return None

    if expected.sl2vl is not None and expected.sl2vl_port is not None:
        lid, inp, outp = expected.sl2vl_port
        text = query(["saquery", "SL2VL", f"{lid}/{inp}/{outp}"])
        if text is not None:
            got = parse_rows(text, "VL")[:NUM_SLS]
            if tuple(got) != expected.sl2vl:
                problems.append(
                    f"SL2VL of switch lid {lid} {inp}->{outp}: OpenSM serves"
                    f" {','.join(map(str, got)) or 'nothing'},"
                    f" ibqos wrote {','.join(map(str, expected.sl2vl))}"
                )
    if expected.vlarb_low is not None and expected.vlarb_port is not None:
        lid, port = expected.vlarb_port
        text = query(["saquery", "VLAR", f"{lid}/{port}/1"])
        if text is not None:
            vls, weights = parse_rows(text, "VL"), parse_rows(text, "Weight")
            served: list[Entry] = [(v, w) for v, w in zip(vls, weights, strict=False) if w > 0]
            want = [(v, w) for v, w in expected.vlarb_low if w > 0]
            if served != want:
                problems.append(
                    f"VLArb low of switch lid {lid} port {port}: OpenSM serves {_entries(served)},"
                    f" ibqos wrote {_entries(want)}"
                )
    for path in expected.paths:
        text = query(["saquery", "PR", "--slid", str(path.slid), "--dlid", str(path.dlid)])
        if text is None:
            continue
        try:
            sl = parse_path_sl(text)
        except IbqosError:
            problems.append(f"job {path.job_id}: no PathRecord lid {path.slid}->{path.dlid}")
            continue
        if sl != path.sl:
            problems.append(
                f"job {path.job_id}: PathRecord lid {path.slid}->{path.dlid} has SL {sl},"
                f" the policy gives SL {path.sl}"
            )
    return problems


def expected_after(
    plan: Plan,
    fabric: Fabric,
    job_lids: Sequence[tuple[str, Sequence[int]]],
    *,
    switch_tables: bool,
    vlarb_low_cap: int,
) -> Expected:
    """What SA should serve after *plan* was applied: the switch tables on one top-level
    switch port (when *switch_tables*: ibqos manages ``qos_swe_*``), and a PathRecord SL
    for each job of *job_lids* (job id, its CA port LIDs)."""
    tables = plan.tables
    sl2vl = vlarb = None
    sl2vl_port = vlarb_port = None
    if tables is not None and switch_tables:
        port = switch_ports(fabric)
        if port is not None:
            lid, a, b = port
            sl2vl, sl2vl_port = tables.sl_to_vl, (lid, a, b)
            vlarb = tuple(tables.vlarb_low[:vlarb_low_cap])
            vlarb_port = (lid, b)
    paths: list[PathCheck] = []
    if tables is not None:  # an SL-owning engine's path_sl overrides the policy
        for job_id, lids in job_lids:
            if lids:
                paths.append(PathCheck(job_id, lids[0], lids[-1], plan.job_sl[job_id]))
    return Expected(sl2vl, sl2vl_port, vlarb, vlarb_port, tuple(paths))


def switch_ports(fabric: Fabric) -> tuple[int, int, int] | None:
    """(LID, in port, out port) of a top-level switch with two linked ports."""
    ports: dict[int, list[int]] = {}
    where: dict[int, tuple[int, int]] = {}  # switch GUID -> (level, LID)
    for fp in fabric.ports.values():
        if fp.is_switch and fp.lid is not None and fp.node_guid is not None:
            ports.setdefault(fp.node_guid, []).append(fp.num)
            where[fp.node_guid] = (fp.level, fp.lid)
    usable = [g for g, nums in ports.items() if len(nums) >= 2]
    if not usable:
        return None
    top = max(usable, key=lambda g: (where[g][0], -g))
    a, b = sorted(ports[top])[:2]
    return where[top][1], a, b


def check_until(
    expected: Expected, run: Runner, timeout_s: float = 3.0, pause_s: float = 0.3
) -> list[str]:
    """:func:`check` again until it passes or *timeout_s* passes (SA may lag the log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        problems = check(expected, run)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(pause_s)


def _entries(entries: Sequence[Entry]) -> str:
    return ",".join(f"{v}:{w}" for v, w in entries) or "nothing"
