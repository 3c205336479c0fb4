"""Unicast forwarding tables (LFTs) as text: ``ibroute`` output, a whole OpenSM dump, coverage.

Two texts give the tables a switch forwards by, ``{switch LID: {destination LID: out port}}``:

- OpenSM's ``opensm-lfts.dump`` (:func:`ibqos.fabric.routes.parse_lft_dump`), what the SM
  programmed, written after each heavy sweep.  OpenSM writes it in place (``fopen``, then
  one switch after another), so a reader can catch it half-written: :func:`read_lft_dump`
  also wants every switch's closing ``N lids dumped`` line.
- infiniband-diags' ``ibroute -n LID``, the LinearForwardingTable blocks read from the
  switch itself by SMPs (:func:`parse_ibroute`)::

      Unicast lids [0x0-0xd] of switch Lid 4 guid 0x0c42a10300020001 (sw-L2-0001):
        Lid  Out   Destination
             Port     Info
      0x0001 001
      0x0004 000
      12 valid lids dumped

  Without ``-n`` each entry ends in ``: (Channel Adapter portguid 0x...: 'name')``, which
  ibroute finds with more SMPs per destination (ten times slower on a lab); both forms
  parse.  Destinations the switch drops (port 255) are left out, as ibroute leaves them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ibqos.errors import LabError, TopologyError
from ibqos.fabric.routes import parse_lft_dump

__all__ = ["Tables", "missing_switches", "parse_ibroute", "read_lft_dump"]

#: ``{switch LID: {destination LID: out port}}``
Tables = dict[int, dict[int, int]]

_IB_HEADER = re.compile(
    r"^Unicast lids \[0x([0-9a-fA-F]+)-0x([0-9a-fA-F]+)\] of switch Lid (\d+) guid 0x[0-9a-fA-F]+"
)
_IB_COLUMNS = re.compile(r"^\s*(Lid\s+Out\s+Destination|Port\s+Info)\s*$")
_IB_ENTRY = re.compile(r"^0x([0-9a-fA-F]+) (\d+)(?:\s*$|\s+:\s)")
_IB_FOOTER = re.compile(r"^(\d+) (valid )?lids dumped\s*$")
_DUMP_HEADER = re.compile(r"^Unicast lids \[0-\d+\] of switch Lid (\d+) ")
_DUMP_FOOTER = re.compile(r"^\d+ lids dumped$")

#: the out port ibroute -a prints for a destination the switch drops
_DROP = 255


def parse_ibroute(text: str, source: str = "ibroute") -> tuple[int, dict[int, int]]:
    """Parse one ``ibroute [-n] LID`` output into (switch LID, {destination LID: port}).

    Raises:
        TopologyError: a line that is not ibroute's, entries outside a table, a second
            table, or an output that ends before its ``N valid lids dumped`` line (or whose
            count disagrees), naming *source* and the line.
    """
    lid: int | None = None
    table: dict[int, int] = {}
    counted = 0
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if m := _IB_HEADER.match(line):
            if lid is not None:
                raise TopologyError(f"{source}:{lineno}: a second table in one ibroute output")
            lid = int(m.group(3))
        elif m := _IB_ENTRY.match(line):
            if lid is None:
                raise TopologyError(f"{source}:{lineno}: LFT entry before the table's header")
            counted += 1
            if int(m.group(2)) != _DROP:
                table[int(m.group(1), 16)] = int(m.group(2))
        elif m := _IB_FOOTER.match(line):
            if lid is None:
                raise TopologyError(f"{source}:{lineno}: footer before the table's header")
            if int(m.group(1)) != counted:
                raise TopologyError(
                    f"{source}:{lineno}: says {m.group(1)} lids dumped, {counted} were printed"
                )
            return lid, table
        elif line.strip() and not _IB_COLUMNS.match(line):
            raise TopologyError(f"{source}:{lineno}: cannot parse {line.strip()[:60]!r}")
    where = f"{source}:{len(lines)}"
    if lid is None:
        raise TopologyError(f"{where}: no forwarding table in the output")
    raise TopologyError(f"{where}: ends before 'lids dumped' (output cut short)")


def read_lft_dump(text: str, source: str = "opensm-lfts.dump") -> Tables:
    """:func:`~ibqos.fabric.routes.parse_lft_dump`, and every switch's table complete.

    Raises:
        TopologyError: a line that does not parse, or a table without its closing
            ``N lids dumped`` line (the file caught while OpenSM wrote it), naming
            *source* and the line.
    """
    try:
        tables = parse_lft_dump(text, source)
    except LabError as err:
        raise TopologyError(str(err)) from err
    open_lid: int | None = None
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if m := _DUMP_HEADER.match(line):
            if open_lid is not None:
                raise TopologyError(
                    f"{source}:{lineno}: the table of switch Lid {open_lid} has no"
                    " 'lids dumped' line"
                )
            open_lid = int(m.group(1))
        elif _DUMP_FOOTER.match(line):
            open_lid = None
    if open_lid is not None:
        raise TopologyError(
            f"{source}:{len(lines)}: ends inside the table of switch Lid {open_lid}"
            " (read while OpenSM wrote it?)"
        )
    return tables


def missing_switches(tables: Mapping[int, object], switch_lids: Iterable[int]) -> list[int]:
    """The switch LIDs of *switch_lids* that *tables* holds no table for, sorted."""
    return sorted(set(switch_lids) - set(tables))
