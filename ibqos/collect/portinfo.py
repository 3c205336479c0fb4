"""Lane capabilities of the fabric, read from PortInfo with infiniband-diags' ``smpquery``.

The lane planner needs to know what every port can do: how many data VLs the ports
operate, how many entries their VLArbitration tables take, and the active MTU.  These are
PortInfo fields (IBA Vol 1, 14.2.5.6 PortInfo):

- OperationalVLs, the data VLs the SM enabled (OpenSM's ``max_op_vls``), never above VLCap;
  OpenSM masks every VL it programs with it (docs/design.md §6.2);
- VLArbitrationLowCap / HighCap, the entries of each VLArb table OpenSM will send;
- NeighborMTU, the MTU the link runs at (MTUCap is only what the port could do).

``smpquery portinfo LID PORT`` sends one LID-routed Get(PortInfo) SMP with the port number
as attribute modifier; for a switch the LID is its port-0 LID.  It prints one dotted line
per field (a real reply is recorded in ``tests/data/smpquery/``)::

    # Port info: Lid 3 port 1
    CapMask:.........................0x0
    NeighborMTU:.....................2048
    VLCap:...........................VL0-7
    VLArbHighCap:....................8
    VLArbLowCap:.....................8
    MtuCap:..........................2048
    OperVLs:.........................VL0-7

Which ports: one linked port of every switch and up to ``sample_cas`` CA ports spread over
the fabric; the fabric supports what its weakest port supports, so the result is the
minimum of each value.  ibsim simulates VL0-7 and both VLArb caps 8 on every port, and
MTU 2048 on every external one (docs/design.md §8.5).

A switch's CapabilityMask is meaningful on port 0 only (OpenSM reads IsSLMappingSupported
from port 0 of a switch, ``qos_extports_setup``); on external ports smpquery shows 0x0,
so ``sl_mapping`` is None for the switch ports read here.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from ibqos.collect.diags import find_diag, last_message, run_diag
from ibqos.errors import IbqosError, MadError, PortInfoError
from ibqos.fabric.model import Fabric
from ibqos.fabric.targets import Target

log = logging.getLogger(__name__)

__all__ = [
    "LaneCaps",
    "PortInfoRunner",
    "PortVLInfo",
    "SmpqueryRunner",
    "parse_portinfo",
    "read_lane_caps",
    "sample_ports",
]

#: ibsim accepts 10 clients (OpenSM is one); each smpquery is one while it runs.
MAX_WORKERS = 6
#: VLCap / OperVLs as libibmad prints them (``mad_dump_vlcap``), as a count of data VLs.
#: OperVLs 0 means "No change" in a Set; a port that shows it has not been set up.
VL_COUNTS = {"VL0": 1, "VL0-1": 2, "VL0-3": 4, "VL0-7": 8, "VL0-14": 15}
_NO_CHANGE = "No change"
#: MTU fields as libibmad prints them (``mad_dump_mtu``): already in bytes.
MTUS = {"256": 256, "512": 512, "1024": 1024, "2048": 2048, "4096": 4096}
#: PortInfo CapabilityMask bit 6, IsSLMappingSupported (IBA 14.2.5.6).
CAP_SL_MAPPING = 1 << 6
_MAX_FAILURE_LINES = 3  # failures warned one by one; the rest are counted

_HEADER = re.compile(r"^# Port info: Lid (\d+) port (\d+)$")
# A long name leaves no room for dots ("McastPkeyTrapSuppressionEnabled:.0"), so none
# are required; the value may hold spaces ("1X or 4X", "<not displayed>").
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\.*(.*)$")
# smpquery lists the set CapabilityMask bits by name, one per tab-indented line
_FLAG = re.compile(r"^\t+(\S.*)$")
_REQUIRED = (
    "LinkState",
    "NeighborMTU",
    "VLCap",
    "VLArbHighCap",
    "VLArbLowCap",
    "MtuCap",
    "OperVLs",
)


@dataclasses.dataclass(frozen=True)
class PortVLInfo:
    """The lane-related PortInfo fields of one port.

    Attributes:
        node_guid: node GUID of the port's node (smpquery does not print it; 0 if unknown).
        port: port number (the attribute modifier of the query).
        lid: LID the query went to (a switch's port-0 LID for a switch port).
        vl_cap: VLCap as a count of data VLs: VL0 -> 1, VL0-1 -> 2, VL0-3 -> 4, VL0-7 -> 8,
            VL0-14 -> 15.
        oper_vls: OperationalVLs, same encoding; 0 if not set up ("No change").
        vlarb_high_cap: entries of the VLArb high-priority table.
        vlarb_low_cap: entries of the VLArb low-priority table.
        mtu_cap: MTUCap, bytes.
        neighbor_mtu: NeighborMTU, the active MTU of the link, bytes.
        sl_mapping: CapabilityMask IsSLMappingSupported; None where not shown (or, for a
            switch's external port, not meaningful).
        link_state: LinkState as smpquery prints it ("Active", "Down", ...).
    """

    node_guid: int
    port: int
    lid: int
    vl_cap: int
    oper_vls: int
    vlarb_high_cap: int
    vlarb_low_cap: int
    mtu_cap: int
    neighbor_mtu: int
    sl_mapping: bool | None
    link_state: str = "Active"

    @property
    def data_vls(self) -> int:
        """Data VLs the port runs: OperVLs capped by VLCap, or VLCap when OperVLs is unset."""
        return min(self.oper_vls, self.vl_cap) if self.oper_vls else self.vl_cap

    @property
    def has_link(self) -> bool:
        """The link is up (Init, Armed or Active); NeighborMTU means nothing otherwise."""
        return self.link_state != "Down"

    @property
    def name(self) -> str:
        """``0x<GUID>[port]``, for messages."""
        return f"0x{self.node_guid:016x}[{self.port}]"


def parse_portinfo(text: str, source: str, *, node_guid: int = 0) -> PortVLInfo:
    """Parse what ``smpquery portinfo LID PORT`` printed on stdout.

    Args:
        text: smpquery's stdout.
        source: name of the output for error messages, e.g. the command line.
        node_guid: node GUID to put in the record (smpquery does not print it).

    Returns:
        the port's lane fields; LID and port come from the header line.

    Raises:
        MadError: no header, a line that is neither a field nor a CapMask flag, a field
            given twice, a required field missing, or a value out of its encoding.
    """
    if not text.strip():
        raise MadError(f"{source}: no output")
    if not text.endswith("\n"):
        # smpquery ends every line; a last line without one may be a cut-off value
        raise MadError(f"{source}: output ends in the middle of a line (truncated)")
    lines = text.splitlines()
    header = _HEADER.match(lines[0])
    if header is None:
        raise MadError(f"{source}: not a PortInfo reply: {lines[0][:80]!r}")
    fields: dict[str, str] = {}
    last = ""
    for lineno, line in enumerate(lines[1:], 2):
        if m := _FIELD.match(line):
            last = m.group(1)
            if last in fields:
                raise MadError(f"{source}: line {lineno}: {last} given twice")
            fields[last] = m.group(2).strip()
        elif _FLAG.match(line) and last.startswith(("CapMask", "CapabilityMask")):
            continue  # the mask's hex value says the same, by number
        elif line.strip():
            raise MadError(f"{source}: line {lineno}: cannot parse: {line.strip()[:80]!r}")
    missing = [f for f in _REQUIRED if f not in fields]
    if missing:
        raise MadError(f"{source}: PortInfo lacks {', '.join(missing)}")
    cap_mask = fields.get("CapMask")
    return PortVLInfo(
        node_guid=node_guid,
        port=int(header.group(2)),
        lid=int(header.group(1)),
        vl_cap=_vls(fields, "VLCap", source),
        oper_vls=_vls(fields, "OperVLs", source),
        vlarb_high_cap=_byte(fields, "VLArbHighCap", source),
        vlarb_low_cap=_byte(fields, "VLArbLowCap", source),
        mtu_cap=_mtu(fields, "MtuCap", source),
        neighbor_mtu=_mtu(fields, "NeighborMTU", source),
        sl_mapping=None if cap_mask is None else bool(_hex(cap_mask, source) & CAP_SL_MAPPING),
        link_state=fields["LinkState"],
    )


def _vls(fields: Mapping[str, str], name: str, source: str) -> int:
    if name == "OperVLs" and fields[name] == _NO_CHANGE:
        return 0
    return _lookup(fields, name, VL_COUNTS, "a VL range", source)


def _mtu(fields: Mapping[str, str], name: str, source: str) -> int:
    return _lookup(fields, name, MTUS, "an MTU", source)


def _lookup(
    fields: Mapping[str, str], name: str, table: Mapping[str, int], what: str, source: str
) -> int:
    """The number *table* gives for field *name* as smpquery printed it."""
    value = fields[name]
    try:
        return table[value]
    except KeyError:
        raise MadError(f"{source}: {name}: not {what}: {value[:30]!r}") from None


def _byte(fields: Mapping[str, str], name: str, source: str) -> int:
    value = fields[name]
    if not (value.isascii() and value.isdigit()) or int(value) > 255:
        raise MadError(f"{source}: {name}: expected 0-255, got {value[:30]!r}")
    return int(value)


def _hex(value: str, source: str) -> int:
    try:
        return int(value, 16)
    except ValueError:
        raise MadError(f"{source}: CapMask: not a hex number: {value[:30]!r}") from None


class PortInfoRunner(Protocol):
    """Runs one smpquery command line and returns its stdout.

    Raises an :class:`~ibqos.errors.IbqosError` (or OSError) saying what went wrong when
    the command does not succeed.
    """

    def __call__(self, argv: Sequence[str], /) -> str: ...


class SmpqueryRunner:
    """Runs ``smpquery`` as a child process, with a wall-clock limit.

    Args:
        timeout_s: limit of one process, seconds; it is killed after that.
        env: environment of the processes (default: this process's).  PATH in it is where
            ``binary`` is looked up.  Under a lab, ``ibqos lab run`` sets LD_PRELOAD,
            SIM_HOST and IBSIM_SOCKNAME in it.
        cwd: working directory (umad2sim clients write ``sys-<pid>/`` there).
        binary: the smpquery program.

    Raises:
        PortInfoError: *binary* is not found.
        ValueError: timeout_s <= 0.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        binary: str = "smpquery",
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.binary = find_diag(binary, self.env, PortInfoError)

    def __call__(self, argv: Sequence[str], /) -> str:
        """Run *argv* (``argv[0]`` names the program in its messages) and return stdout.

        Raises:
            PortInfoError: the process timed out, could not start or exited non-zero
                (with its last message: an ``ibwarn`` on stderr or its ``iberror`` line).
        """
        # libibmad tries an unanswered SMP 3 times (MAD_DEF_RETRIES), waiting -t ms (1000
        # by default) each.  A fifth of our limit per try lets smpquery give up and exit
        # before we kill it: a killed umad2sim client keeps its ibsim slot (docs/design.md §8.1).
        mad_ms = max(1, int(self.timeout_s * 1000 / 5))
        args = [argv[0], "-t", str(mad_ms), *argv[1:]]
        proc = run_diag(args, self.binary, timeout_s=self.timeout_s, env=self.env, cwd=self.cwd)
        if proc.timed_out:
            raise PortInfoError(f"{argv[0]} timed out after {self.timeout_s:g} s")
        if proc.exec_error is not None:
            raise PortInfoError(f"cannot run {self.binary}: {proc.reason}")
        if proc.returncode != 0:
            message = last_message(proc.stdout, proc.stderr)
            raise PortInfoError(f"{argv[0]} exited {proc.returncode}: {message}")
        return proc.stdout


@dataclasses.dataclass(frozen=True)
class LaneCaps:
    """What every sampled port supports: the minimum over the ports that answered.

    Attributes:
        data_vls: data VLs (OperVLs capped by VLCap; VLCap where OperVLs is unset).
        vlarb_low_cap: entries of the VLArb low-priority table.
        vlarb_high_cap: entries of the VLArb high-priority table.
        mtu: active MTU (NeighborMTU) of the ports with a link, bytes; 0 if none has one.
        ports_read: ports that answered.
        ports_failed: ports that did not (or whose answer could not be parsed).
        warnings: one line per failure (a few, then a count) and per disagreement.
        ports: the records of the ports that answered, in the order they were sampled.
    """

    data_vls: int
    vlarb_low_cap: int
    vlarb_high_cap: int
    mtu: int
    ports_read: int
    ports_failed: int
    warnings: tuple[str, ...] = ()
    ports: tuple[PortVLInfo, ...] = ()

    def describe(self) -> str:
        """One line for logs."""
        return (
            f"lanes: {self.data_vls} data VLs, VLArb low {self.vlarb_low_cap} / high "
            f"{self.vlarb_high_cap} entries, MTU {self.mtu} bytes ({self.ports_read} ports "
            f"read, {self.ports_failed} failed, {len(self.warnings)} warnings)"
        )


def sample_ports(targets: Sequence[Target], sample_cas: int = 32) -> list[Target]:
    """The ports to read: one per switch, then up to *sample_cas* CA ports.

    Each switch gives its lowest-numbered port (all of a switch's ports answer through its
    port-0 LID, so one process per switch suffices).  CA ports are sorted by (GUID, port)
    and, when there are more than *sample_cas*, taken at even steps over that order, so a
    sample of a large fabric still reaches both of its ends.

    Raises:
        ValueError: sample_cas < 0.
    """
    if sample_cas < 0:
        raise ValueError(f"sample_cas must be 0 or more, got {sample_cas}")
    switches: dict[int, Target] = {}
    for t in targets:
        if t.is_switch and (t.node_guid not in switches or t.port < switches[t.node_guid].port):
            switches[t.node_guid] = t
    cas = sorted((t for t in targets if not t.is_switch), key=lambda t: (t.node_guid, t.port))
    n, k = len(cas), min(sample_cas, len(cas))
    spread = [cas[i * n // k] for i in range(k)]
    return [switches[g] for g in sorted(switches)] + spread


def read_lane_caps(
    fabric: Fabric,
    *,
    sample_cas: int = 32,
    workers: int = 4,
    timeout_s: float = 5.0,
    runner: PortInfoRunner | None = None,
) -> LaneCaps:
    """Read PortInfo of a sample of ports (:func:`sample_ports`) and reduce it.

    Args:
        fabric: the fabric model; its targets give the ports and LIDs.
        sample_cas: CA ports to read at most.
        workers: smpquery processes at the same time, 1 to 6 (ibsim takes 10 clients).
        timeout_s: limit of one smpquery process, seconds (for the default runner).
        runner: runs one command line and returns its stdout; default
            :class:`SmpqueryRunner` in this process's environment and directory.

    Returns:
        the minimum of each value over the ports that answered.  Failures and ports that
        differ from the others are warned about (logged, and kept in ``warnings``).

    Raises:
        PortInfoError: no port to read, smpquery not found, or no port answered (naming the
            first failure).
        ValueError: workers not 1..6, sample_cas < 0 or timeout_s <= 0.
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers must be 1 to {MAX_WORKERS}, got {workers}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    sample = sample_ports(fabric.targets(), sample_cas)
    if not sample:
        raise PortInfoError(f"{fabric.source}: no port with a LID to read PortInfo from")
    run: PortInfoRunner = runner if runner is not None else SmpqueryRunner(timeout_s)
    with ThreadPoolExecutor(min(workers, len(sample)), thread_name_prefix="smpquery") as pool:
        results = list(pool.map(_reader(run), sample))
    infos = [r for r in results if isinstance(r, PortVLInfo)]
    failures = [r for r in results if isinstance(r, str)]
    if not infos:
        raise PortInfoError(
            f"PortInfo: none of {len(sample)} ports answered; first failure: {failures[0]}"
        )
    warnings = failures[:_MAX_FAILURE_LINES]
    if len(failures) > _MAX_FAILURE_LINES:
        warnings.append(f"PortInfo: {len(failures) - _MAX_FAILURE_LINES} more ports failed")
    linked = [p for p in infos if p.has_link]
    if len(linked) < len(infos):
        down = next(p for p in infos if not p.has_link)
        warnings.append(
            f"PortInfo: {len(infos) - len(linked)} of {len(infos)} ports read have no link, "
            f"e.g. {down.name} ({down.link_state}): left out of the MTU"
        )
    checks: list[tuple[str, list[tuple[PortVLInfo, int]]]] = [
        ("data VLs", [(p, p.data_vls) for p in infos]),
        ("VLArbLowCap", [(p, p.vlarb_low_cap) for p in infos]),
        ("VLArbHighCap", [(p, p.vlarb_high_cap) for p in infos]),
        ("NeighborMTU", [(p, p.neighbor_mtu) for p in linked]),
    ]
    warnings += [w for what, values in checks if (w := _disagreement(what, values))]
    if not linked:
        warnings.append("PortInfo: no port read has a link: MTU unknown (0)")
    caps = LaneCaps(
        data_vls=min(p.data_vls for p in infos),
        vlarb_low_cap=min(p.vlarb_low_cap for p in infos),
        vlarb_high_cap=min(p.vlarb_high_cap for p in infos),
        mtu=min((p.neighbor_mtu for p in linked), default=0),
        ports_read=len(infos),
        ports_failed=len(failures),
        warnings=tuple(warnings),
        ports=tuple(infos),
    )
    for line in caps.warnings:
        log.warning("%s", line)
    return caps


def _reader(run: PortInfoRunner) -> Callable[[Target], PortVLInfo | str]:
    """A function reading one target: its record, or one line saying why not."""

    def read(t: Target) -> PortVLInfo | str:
        argv = ["smpquery", "portinfo", str(t.lid), str(t.port)]
        what = f"PortInfo of 0x{t.node_guid:016x}[{t.port}] (lid {t.lid})"
        try:
            info = parse_portinfo(run(argv), " ".join(argv), node_guid=t.node_guid)
        except (IbqosError, OSError) as err:
            return f"{what}: {err}"
        if (info.lid, info.port) != (t.lid, t.port):
            return f"{what}: the answer is for lid {info.lid} port {info.port}"
        if t.is_switch:
            # a switch's CapabilityMask lives on port 0; external ports show 0x0
            info = dataclasses.replace(info, sl_mapping=None)
        return info

    return read


def _disagreement(what: str, values: Sequence[tuple[PortVLInfo, int]]) -> str:
    """A warning when the ports differ: how many have the minimum, and one of them."""
    if not values:
        return ""
    low = min(v for _, v in values)
    high = max(v for _, v in values)
    if low == high:
        return ""
    at_low = [p for p, v in values if v == low]
    return (
        f"PortInfo: {what} differ: {len(at_low)} of {len(values)} ports have {low} "
        f"(others up to {high}), e.g. {at_low[0].name}"
    )
