"""How a perfquery sweep is laid out: targets grouped into processes, their command lines,
and their readings turned into the sweep table.

:class:`~ibqos.collect.perfquery.PerfqueryBackend` runs the processes; the module
docstring there says how ports are grouped and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from ibqos.collect.perfquery_parse import CAP_XMIT_WAIT, U64_MAX, VL_FIELDS, CounterBlock
from ibqos.collect.sweep import VL_WAIT_COLUMNS, empty_table, sweep_dtypes
from ibqos.errors import MadError
from ibqos.fabric.targets import Target

__all__ = [
    "Group",
    "GroupResult",
    "Kind",
    "blocks_by_port",
    "command",
    "make_groups",
    "sweep_table",
    "vl_verdict",
]

#: what perfquery prints (stdout) when the PortVLXmitWaitCounters Get itself failed
_VL_IBERROR = "cannot query PortVLXmitWaitCounters"
#: libibmad's words (stderr, with ``-e``) for a reply with an error status
_STATUS_ERROR = "MAD completed with error status"
#: libibmad's words (stderr) for a Get that got no reply after its retries
_NO_REPLY = "_do_madrpc failed"

#: which attribute a perfquery process reads: PortCounters, PortCountersExtended or
#: PortVLXmitWaitCounters
Kind = Literal["basic", "extended", "vl"]
_FLAGS: dict[str, list[str]] = {"basic": [], "extended": ["-x"], "vl": ["-e", "--vlxmitcounters"]}


@dataclass
class Group:
    """Targets read by one perfquery process (plus its PortCounters twin)."""

    lid: int
    node_guid: int
    rows: list[int]  # indices into the sweep's targets
    ports: list[int]  # distinct ports, ascending


@dataclass
class GroupResult:
    """What one group's processes produced."""

    time_s: float = float("nan")
    mono_s: float = float("nan")  # time.monotonic() at time_s: intervals are measured on it
    extended: dict[int, CounterBlock] = field(default_factory=dict)
    basic: dict[int, CounterBlock] = field(default_factory=dict)
    vl: dict[int, CounterBlock] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # port -> message
    processes: int = 0
    failed: int = 0
    timeouts: int = 0
    mads: int = 0
    exec_error: str = ""
    message: str = ""  # why the last failed process failed
    iberror: str = ""  # the iberror line the last process printed, if any
    vl_verdict: str = ""  # "yes", "no" or "lost": what the node's VL reads said
    vl_message: str = ""  # why "no" or "lost"
    vl_lost: list[str] = field(default_factory=list)  # per-VL reads that failed, one line each


def make_groups(targets: Sequence[Target], per_switch: bool) -> list[Group]:
    """The processes of a sweep: one per switch LID (*per_switch*) or one per port, and
    one per CA port either way."""
    groups: list[Group] = []
    by_switch: dict[int, Group] = {}
    for i, t in enumerate(targets):
        if per_switch and t.is_switch:
            group = by_switch.get(t.lid)
            if group is None:
                group = by_switch[t.lid] = Group(t.lid, t.node_guid, [], [])
                groups.append(group)
        else:
            group = Group(t.lid, t.node_guid, [], [])
            groups.append(group)
        group.rows.append(i)
        if t.port not in group.ports:
            group.ports.append(t.port)
    for group in groups:
        group.ports.sort()
    return groups


def command(
    extra_args: Sequence[str], kind: Kind, lid: int, ports: Sequence[int]
) -> tuple[list[str], str]:
    """The command line reading *kind* of *ports* of *lid*, and its name for messages
    (without *extra_args*, which are the same for every process)."""
    port_list = ",".join(str(p) for p in ports)
    flag = _FLAGS[kind]
    argv = ["perfquery", *extra_args, *flag, str(lid), port_list]
    return argv, " ".join(["perfquery", *flag, str(lid), port_list])


def blocks_by_port(
    blocks: list[CounterBlock], lid: int, ports: list[int], kind: Kind, source: str
) -> dict[int, CounterBlock]:
    """The blocks of one process by port.

    Raises:
        MadError: a block of another kind, LID or port than asked for, or a port twice.
    """
    out: dict[int, CounterBlock] = {}
    for b in blocks:
        if _kind(b) != kind or b.lid != lid or b.port not in ports:
            name = {"basic": "", "extended": "extended ", "vl": "PortVLXmitWaitCounters "}
            raise MadError(
                f"{source}: unexpected block: {name[_kind(b)]}counters of lid {b.lid} port {b.port}"
            )
        if b.port in out:
            raise MadError(f"{source}: port {b.port} printed twice")
        out[b.port] = b
    return out


def vl_verdict(result: GroupResult, message: str) -> str:
    """What a failed PortVLXmitWaitCounters process says of its node: "no" (an error
    status), "lost" (no reply to that Get), or "" (something else failed, such as the
    process or ClassPortInfo: nothing learnt)."""
    if _VL_IBERROR not in result.iberror:
        return ""
    if _STATUS_ERROR in message:
        return "no"
    return "lost" if _NO_REPLY in message else ""


def _kind(block: CounterBlock) -> Kind:
    if block.vl_xmit_wait:
        return "vl"
    return "extended" if block.extended else "basic"


def sweep_table(
    targets: Sequence[Target],
    groups: Sequence[Group],
    results: Sequence[GroupResult],
    wait: bool,
    vl: bool = False,
) -> pd.DataFrame:
    """The sweep table, built column by column from Python ints so uint64 stays exact;
    with the per-VL columns if *vl*."""
    blank = empty_table(targets, vl_wait=vl)
    cols: dict[str, list[object]] = {str(c): v.tolist() for c, v in blank.items()}
    for group, res in zip(groups, results, strict=True):
        for i in group.rows:
            port = targets[i].port
            ext = res.extended.get(port)
            if ext is None:
                cols["error"][i] = res.errors.get(port, f"lid {group.lid} port {port}: not read")
                continue
            f = ext.fields
            cols["time_s"][i] = res.time_s
            cols["xmit_bytes"][i] = min(4 * f["PortXmitData"], U64_MAX)
            cols["rcv_bytes"][i] = min(4 * f["PortRcvData"], U64_MAX)
            cols["xmit_pkts"][i] = f["PortXmitPkts"]
            cols["rcv_pkts"][i] = f["PortRcvPkts"]
            cols["counter_bits"][i] = 64
            cols["error"][i] = ""
            # without PortCounters only XmitWait stays unknown (the failure is logged);
            # likewise the per-VL counters
            basic = res.basic.get(port) if wait else None
            if basic is not None and basic.cap_mask & CAP_XMIT_WAIT:
                cols["xmit_wait"][i] = basic.fields["PortXmitWait"]
            block = res.vl.get(port)
            if block is not None:
                for col, name in zip(VL_WAIT_COLUMNS, VL_FIELDS, strict=True):
                    cols[col][i] = block.fields[name]
    return pd.DataFrame(cols).astype(sweep_dtypes(vl))
