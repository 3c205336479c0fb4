"""Parsing what infiniband-diags' ``perfquery`` prints: one block of counters per port.

``perfquery -x LID PORTS`` prints PortCountersExtended, ``perfquery LID PORTS``
PortCounters and ``perfquery -e --vlxmitcounters LID PORT`` PortVLXmitWaitCounters, each
as a header line and one ``Name:....value`` line per field (recorded replies are in
``tests/data/perfquery/``); :mod:`ibqos.collect.perfquery` runs the processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ibqos.collect.diags import IBERROR
from ibqos.collect.sweep import VL_COUNT
from ibqos.errors import MadError

__all__ = [
    "CAP_EXT_WIDTH",
    "CAP_XMIT_WAIT",
    "NO_DEVICE",
    "U64_MAX",
    "VL_FIELDS",
    "CounterBlock",
    "parse_perfquery",
]

#: PerfMgt ClassPortInfo CapabilityMask bits (docs/design.md §7.3).
CAP_EXT_WIDTH = 0x0200
CAP_XMIT_WAIT = 0x1000
#: the largest value of a 64-bit counter
U64_MAX = 2**64 - 1

_HEADER = re.compile(
    r"^# Port (extended )?counters: Lid (\d+) port (\d+) "
    r"\(CapMask: 0x([0-9A-Fa-f]+)(?: CapMask2: 0x([0-9A-Fa-f]+))?\)$"
)
#: ``common_func`` in perfquery.c: no capability masks in this header
_VL_HEADER = re.compile(r"^# PortVLXmitWaitCounters counters: Lid (\d+) port (\d+)$")
VL_FIELDS = tuple(f"PortVLXmitWait{vl}" for vl in range(VL_COUNT))
_FIELD = re.compile(r"^([A-Za-z0-9_]+):\.*(0x[0-9A-Fa-f]+|[0-9]+)$")
#: Fields a block must have to be complete.  perfquery prints them in this order, the last
#: one last; PortCounters always ends with PortXmitWait (forced to 0 without CapMask bit
#: 12), PortCountersExtended with the unicast/multicast packets when CapMask bit 9 is set.
_REQUIRED = ("PortSelect", "PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")
_REQUIRED_BASIC = ("PortXmitWait",)
#: what perfquery/libibmad print when this host has no usable MAD port (recorded here)
NO_DEVICE = ("can't open UMAD port", "iberror: failed: Failed to open")
_REQUIRED_IETF = (
    "PortUnicastXmitPkts",
    "PortUnicastRcvPkts",
    "PortMulticastXmitPkts",
    "PortMulticastRcvPkts",
)


@dataclass(frozen=True)
class CounterBlock:
    """One port's counters as perfquery printed them.

    Attributes:
        extended: PortCountersExtended (``-x``) rather than PortCounters.
        lid: LID the query went to.
        port: port number from the header.
        cap_mask: PerfMgt ClassPortInfo CapabilityMask (0 in PortVLXmitWaitCounters
            blocks, whose header has none).
        cap_mask2: CapabilityMask2 (``-x`` headers only).
        fields: every ``Name:....value`` line of the block, as integers.
        vl_xmit_wait: a PortVLXmitWaitCounters block (``--vlxmitcounters``).
    """

    extended: bool
    lid: int
    port: int
    cap_mask: int
    cap_mask2: int | None
    fields: dict[str, int]
    vl_xmit_wait: bool = False


def parse_perfquery(text: str, source: str = "perfquery") -> tuple[list[CounterBlock], str]:
    """Parse perfquery's stdout.

    Args:
        text: what perfquery printed on stdout.
        source: name of the output for error messages.

    Returns:
        the complete counter blocks, in order, and the ``iberror`` line perfquery printed
        when it gave up ("" if none).

    Blank lines are ignored.

    Raises:
        MadError: a line that is neither a header, a counter nor an iberror line, a value
            out of range, a counter outside a block, a block without its counters, or
            output cut off in the middle of a line.
    """
    if text and not text.endswith("\n"):
        # perfquery ends every line; a last line without one may be a cut-off number
        raise MadError(f"{source}: output ends in the middle of a line (truncated)")
    blocks: list[CounterBlock] = []
    current: CounterBlock | None = None
    iberror = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{source}: line {lineno}"
        if not line.strip():
            continue  # a saved output or a wrapper may end with (or hold) blank lines
        if iberror:
            raise MadError(f"{where}: output after the error line: {line[:60]!r}")
        if m := _HEADER.match(line):
            _check_block(current, source)
            current = CounterBlock(
                extended=m.group(1) is not None,
                lid=int(m.group(2)),
                port=int(m.group(3)),
                cap_mask=int(m.group(4), 16),
                cap_mask2=int(m.group(5), 16) if m.group(5) is not None else None,
                fields={},
            )
            blocks.append(current)
        elif m := _VL_HEADER.match(line):
            _check_block(current, source)
            current = CounterBlock(
                extended=False,
                lid=int(m.group(1)),
                port=int(m.group(2)),
                cap_mask=0,
                cap_mask2=None,
                fields={},
                vl_xmit_wait=True,
            )
            blocks.append(current)
        elif m := _FIELD.match(line):
            if current is None:
                raise MadError(f"{where}: counter before any header: {line[:60]!r}")
            value = int(m.group(2), 0)
            if value > U64_MAX:
                raise MadError(f"{where}: {m.group(1)} out of range: {m.group(2)}")
            if m.group(1) in current.fields:
                raise MadError(f"{where}: {m.group(1)} repeated in one block")
            current.fields[m.group(1)] = value
        elif IBERROR.match(line):
            iberror = line.strip()
        else:
            raise MadError(f"{where}: cannot parse: {line[:60]!r}")
    _check_block(current, source)
    return blocks, iberror


def _check_block(block: CounterBlock | None, source: str) -> None:
    if block is None:
        return
    required: tuple[str, ...] = _REQUIRED
    if block.vl_xmit_wait:
        required = ("PortSelect", *VL_FIELDS)
    elif not block.extended:
        required += _REQUIRED_BASIC
    elif block.cap_mask & CAP_EXT_WIDTH:
        required += _REQUIRED_IETF
    missing = [f for f in required if f not in block.fields]
    if missing:
        raise MadError(
            f"{source}: block for lid {block.lid} port {block.port} lacks {', '.join(missing)}"
        )
    if block.fields["PortSelect"] != block.port:
        raise MadError(
            f"{source}: block for lid {block.lid} port {block.port} has PortSelect "
            f"{block.fields['PortSelect']}"
        )
