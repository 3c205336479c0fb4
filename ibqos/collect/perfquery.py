"""Counter backend that runs infiniband-diags' ``perfquery`` and parses what it prints.

``perfquery -x LID PORTS`` reads PortCountersExtended (64-bit data and packet counters);
``perfquery LID PORTS`` reads PortCounters, whose PortXmitWait is the only XmitWait a PMA
without CapabilityMask2 bit 1 has (reference B.3-B.5).  Both print one block per port::

    # Port extended counters: Lid 3 port 1 (CapMask: 0x1300 CapMask2: 0x0000000)
    PortSelect:......................1
    PortXmitData:....................6601569545
    ...

How ports are grouped into processes:

- per-switch mode (default): one process per switch LID with the target ports as a comma
  list (``perfquery -x 3 1,2,5``).  An explicit list reads exactly the target ports; the
  ``-l LID 255`` form would read every port of the switch and first send two more SMPs
  (NodeInfo, SwitchInfo) to learn how many there are.
- CA ports, and every target in per-port mode: one process per port
  (``perfquery -x 7 1``).  A CA's PMA only answers for the port the query arrived on.
- With ``xmit_wait`` on, the same worker then runs the PortCounters query for the group.
- With ``vl_xmit_wait`` on, the same worker then reads PortVLXmitWaitCounters with
  ``perfquery -e --vlxmitcounters LID PORT``, one process per port in either mode:
  perfquery reads only the first port of a list for this attribute (it loops over ports
  for PortCounters and PortCountersExtended only).  ``-e`` makes libibmad print the MAD
  status of a failed Get (``MAD completed with error status 0xc``).  While a node's
  support is unknown, its first answer decides, as the native backend's probe does: an
  error status means not supported, for good; no reply (``_do_madrpc failed``) means not
  supported for ``REPROBE_SWEEPS`` sweeps; either way the group's other ports are skipped
  (in per-port mode each group is one port, so every port of a new node is tried once,
  each costing three 1 s libibmad tries when there is no reply).  The values share the
  row's ``time_s`` (the data counters' reading): they are read a few processes later, but
  as many later in every sweep, so the intervals agree.  Output::

      # PortVLXmitWaitCounters counters: Lid 3 port 2
      PortSelect:......................2
      CounterSelect:...................0x0000
      PortVLXmitWait0:.................0
      ...
      PortVLXmitWait15:................0

Every process first sends Get(ClassPortInfo), then one Get per port; each MAD that crosses a
simulated link adds to the data counters it crosses (reference C.3), which ``stats["mads"]``
lets a caller bound.

A process that fails (non-zero exit, timeout, output that does not parse) fails only the
rows it did not print: ``perfquery`` stops at the first port that does not answer, and the
blocks printed before it are complete readings.  Each failed row's ``error`` names the LID,
the port and perfquery's last message: its last stderr line (``ibwarn``/``ibpanic``), else
the ``perfquery: iberror: ...`` line it prints on stdout.  ibsim accepts ten clients at
most (OpenSM is one); a client beyond that fails at once with ``ibpanic: ... sim_init:
connect failed``, so keep ``workers`` at six or below on a lab.

Data counters are converted to bytes here (x 4).  A PortXmitData above (2^64 - 1) / 4 words
saturates at 2^64 - 1 bytes, as the counter itself would (decades at today's link rates).
"""

from __future__ import annotations

import logging
import os
import re
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from ibqos.collect.sweep import (
    VL_COUNT,
    VL_WAIT_COLUMNS,
    Sweep,
    empty_table,
    sweep_dtypes,
)
from ibqos.errors import CollectError, MadError
from ibqos.fabric.targets import (
    Target,
)

log = logging.getLogger(__name__)

__all__ = [
    "CounterBlock",
    "PerfqueryBackend",
    "last_message",
    "parse_perfquery",
]

#: PerfMgt ClassPortInfo CapabilityMask bits (reference B.3).
CAP_EXT_WIDTH = 0x0200
CAP_XMIT_WAIT = 0x1000
#: sweeps between two probes of a node whose PortVLXmitWaitCounters got no reply
REPROBE_SWEEPS = 10

U64_MAX = 2**64 - 1
_HEADER = re.compile(
    r"^# Port (extended )?counters: Lid (\d+) port (\d+) "
    r"\(CapMask: 0x([0-9A-Fa-f]+)(?: CapMask2: 0x([0-9A-Fa-f]+))?\)$"
)
#: ``common_func`` in perfquery.c: no capability masks in this header
_VL_HEADER = re.compile(r"^# PortVLXmitWaitCounters counters: Lid (\d+) port (\d+)$")
_VL_FIELDS = tuple(f"PortVLXmitWait{vl}" for vl in range(VL_COUNT))
#: what perfquery prints (stdout) when the PortVLXmitWaitCounters Get itself failed
_VL_IBERROR = "cannot query PortVLXmitWaitCounters"
#: libibmad's words (stderr, with ``-e``) for a reply with an error status
_STATUS_ERROR = "MAD completed with error status"
#: libibmad's words (stderr) for a Get that got no reply after its retries
_NO_REPLY = "_do_madrpc failed"
_FIELD = re.compile(r"^([A-Za-z0-9_]+):\.*(0x[0-9A-Fa-f]+|[0-9]+)$")
_IBERROR = re.compile(r"^\S+: iberror: ")
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
        elif _IBERROR.match(line):
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
        required = ("PortSelect", *_VL_FIELDS)
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


def last_message(stdout: str, stderr: str) -> str:
    """perfquery's own word on a failure: the last stderr line, else its iberror line."""
    for line in reversed(stderr.splitlines()):
        if line.strip():
            return line.strip()
    for line in reversed(stdout.splitlines()):
        if _IBERROR.match(line):
            return line.strip()
    return "no message"


#: which attribute a perfquery process reads: PortCounters, PortCountersExtended or
#: PortVLXmitWaitCounters
_Kind = Literal["basic", "extended", "vl"]
_FLAGS: dict[str, list[str]] = {"basic": [], "extended": ["-x"], "vl": ["-e", "--vlxmitcounters"]}


@dataclass
class _Group:
    """Targets read by one perfquery process (plus its PortCounters twin)."""

    lid: int
    node_guid: int
    rows: list[int]  # indices into the sweep's targets
    ports: list[int]  # distinct ports, ascending


@dataclass
class _Result:
    """What one group's processes produced."""

    time_s: float = float("nan")
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


class PerfqueryBackend:
    """Reads PMA counters by running ``perfquery`` processes in parallel.

    Args:
        workers: processes run at the same time (at most 6 on an ibsim lab, see above).
        per_switch: one process per switch (True) or one per port (False).
        xmit_wait: also read PortCounters for PortXmitWait (a second process per group).
        timeout_s: wall-clock limit of one process, seconds; it is killed after that.
        env: environment of the processes (default: this process's).  PATH in it is
            where ``binary`` is looked up.
        cwd: working directory of the processes (umad2sim clients write ``sys-<pid>/``
            there).
        binary: the perfquery program.
        extra_args: options passed before the others, e.g. ``["-C", "mlx5_0", "-P", "1"]``.
        vl_xmit_wait: also read PortVLXmitWaitCounters (one more process per port, see
            the module docstring); the sweep table then has the ``vl_xmit_wait0..15``
            columns.

    Raises:
        CollectError: *binary* is not found.
        ValueError: workers < 1 or timeout_s <= 0.
    """

    name = "perfquery"

    def __init__(
        self,
        workers: int = 4,
        per_switch: bool = True,
        xmit_wait: bool = True,
        timeout_s: float = 10.0,
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path | None = None,
        binary: str = "perfquery",
        extra_args: Sequence[str] = (),
        vl_xmit_wait: bool = False,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.workers = workers
        self.per_switch = per_switch
        self.xmit_wait = xmit_wait
        self.vl_xmit_wait = vl_xmit_wait
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.extra_args = list(extra_args)
        search = (self.env if self.env is not None else os.environ).get("PATH", os.defpath)
        found = shutil.which(binary, path=search)
        if found is None:
            raise CollectError(f"{binary} not found on PATH (install infiniband-diags)")
        self.binary = found
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._vl_known: dict[int, bool] = {}  # node GUID -> answers PortVLXmitWaitCounters
        self._vl_due: dict[int, int] = {}  # node GUID -> sweep to probe it again
        self._sweeps = 0

    def sweep(self, targets: Sequence[Target]) -> Sweep:
        """Read every target once (see the module docstring for how).

        The sweep's ``stats``: ``sent`` processes run, ``answered`` those that exited 0
        having printed every port asked for, ``failed`` the others, ``timeouts`` those
        killed after ``timeout_s``, ``mads`` the PMA Gets they were asked to send
        (ClassPortInfo plus one per port, per process; retries by libibmad not counted).
        ``cpu_s`` is this process's CPU time plus that of its finished children.
        PortVLXmitWaitCounters processes count in all of these.

        Raises:
            CollectError: perfquery could not be started at all.
        """
        targets = list(targets)
        started = time.time()
        t0 = time.monotonic()
        cpu0 = _cpu_s()
        self._sweeps += 1
        for guid, due in list(self._vl_due.items()):
            if due <= self._sweeps:  # its VL probe got no reply a while ago: try again
                del self._vl_due[guid]
                self._vl_known.pop(guid, None)
        groups = self._groups(targets)
        pool = self._executor()
        results = list(pool.map(self._read_group, groups))
        missing = next((r.exec_error for r in results if r.exec_error), "")
        if missing:
            raise CollectError(f"cannot run {self.binary}: {missing}")
        messages = [m for r in results for m in r.errors.values()]
        if (
            targets
            and len(messages) >= len(targets)
            and all(any(x in m for x in NO_DEVICE) for m in messages)
        ):
            # every process failed to open the local MAD port: no device here, not a port
            raise CollectError(messages[0])
        if self.vl_xmit_wait:
            self._vl_learn(groups, results)
        table = _table(targets, groups, results, self.xmit_wait, self.vl_xmit_wait)
        stats = {
            "sent": sum(r.processes for r in results),
            "answered": sum(r.processes - r.failed for r in results),
            "failed": sum(r.failed for r in results),
            "timeouts": sum(r.timeouts for r in results),
            "mads": sum(r.mads for r in results),
        }
        return Sweep(
            targets=targets,
            table=table,
            backend=self.name,
            started_s=started,
            duration_s=time.monotonic() - t0,
            cpu_s=_cpu_s() - cpu0,
            stats=stats,
        )

    def close(self) -> None:
        """Stop the worker threads (no process outlives a sweep)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def __enter__(self) -> PerfqueryBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------
    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="perfquery")
            return self._pool

    def _groups(self, targets: Sequence[Target]) -> list[_Group]:
        groups: list[_Group] = []
        by_switch: dict[int, _Group] = {}
        for i, t in enumerate(targets):
            if self.per_switch and t.is_switch:
                group = by_switch.get(t.lid)
                if group is None:
                    group = by_switch[t.lid] = _Group(t.lid, t.node_guid, [], [])
                    groups.append(group)
            else:
                group = _Group(t.lid, t.node_guid, [], [])
                groups.append(group)
            group.rows.append(i)
            if t.port not in group.ports:
                group.ports.append(t.port)
        for group in groups:
            group.ports.sort()
        return groups

    def _read_group(self, group: _Group) -> _Result:
        result = _Result()
        result.extended = self._read(group.lid, group.ports, "extended", result)
        result.time_s = time.time()
        read = [p for p in group.ports if p in result.extended]
        if self.xmit_wait and read:
            result.basic = self._read(group.lid, read, "basic", result, "PortCounters: ")
        if self.vl_xmit_wait and read:
            self._read_vl(group, read, result)
        return result

    def _read_vl(self, group: _Group, ports: list[int], result: _Result) -> None:
        """Read PortVLXmitWaitCounters of *ports* into ``result.vl``, one process each.

        Runs in a worker: it only reads what is known of the node (the main thread
        updates that after the sweep, from ``result.vl_verdict``).
        """
        known = self._vl_known.get(group.node_guid)
        if known is False:
            return
        for port in ports:
            got, msg = self._run(group.lid, [port], "vl", result)
            result.vl.update(got)
            if got:
                result.vl_verdict = "yes"
            elif known is None and not result.vl_verdict:
                verdict = _vl_verdict(result, msg)
                if verdict:  # the node's first answer says it has none: skip the rest
                    result.vl_verdict, result.vl_message = verdict, msg
                    return

    def _vl_learn(self, groups: Sequence[_Group], results: Sequence[_Result]) -> None:
        """Remember which nodes answer PortVLXmitWaitCounters, from the verdicts of the
        sweep's groups of nodes not known yet (one good port anywhere is enough)."""
        rank = {"lost": 1, "no": 2, "yes": 3}
        verdicts: dict[int, tuple[str, int, str]] = {}
        for group, res in zip(groups, results, strict=True):
            guid = group.node_guid
            if not res.vl_verdict or guid in self._vl_known:
                continue
            best = verdicts.get(guid)
            if best is None or rank[res.vl_verdict] > rank[best[0]]:
                verdicts[guid] = (res.vl_verdict, group.lid, res.vl_message)
        for guid, (verdict, lid, message) in verdicts.items():
            self._vl_known[guid] = verdict == "yes"
            if verdict == "yes":
                continue
            later = ""
            if verdict == "lost":  # nothing came back: maybe lost, so not final
                self._vl_due[guid] = self._sweeps + REPROBE_SWEEPS
                later = f"; asked again in {REPROBE_SWEEPS} sweeps"
            log.info(
                "node 0x%016x (lid %d): no PortVLXmitWaitCounters (%s): its per-VL columns "
                "stay empty%s",
                guid,
                lid,
                message,
                later,
            )

    def _read(
        self, lid: int, ports: list[int], kind: _Kind, result: _Result, label: str = ""
    ) -> dict[int, CounterBlock]:
        """Read *ports* of *lid*; failed ports get their message in ``result.errors``.

        perfquery stops at the first port that fails.  When it printed some ports before
        that one, the PMA answers, so the ports after the failed one are read by another
        process; when it printed none, the whole rest of the list fails with it.
        """
        blocks: dict[int, CounterBlock] = {}
        todo = list(ports)
        while todo:
            got, msg = self._run(lid, todo, kind, result)
            blocks.update(got)
            if not msg:
                break
            unread = [p for p in todo if p not in got]
            bad = unread[:1] if got else unread
            for port in bad:
                result.errors.setdefault(port, f"lid {lid} port {port}: {label}{msg}")
            todo = unread[1:] if got else []
        return blocks

    def _run(
        self, lid: int, ports: list[int], kind: _Kind, result: _Result
    ) -> tuple[dict[int, CounterBlock], str]:
        """Run one process: the blocks it printed by port, and what went wrong ("" if not)."""
        port_list = ",".join(str(p) for p in ports)
        flag = _FLAGS[kind]
        argv = ["perfquery", *self.extra_args, *flag, str(lid), port_list]
        what = " ".join(["perfquery", *flag, str(lid), port_list])
        result.processes += 1
        result.mads += 1 + len(ports)  # Get(ClassPortInfo), then one Get per port
        result.iberror = ""  # this process's, once its output is parsed
        try:
            proc = subprocess.run(
                argv,
                executable=self.binary,  # argv[0] stays "perfquery" in its messages
                env=self.env,
                cwd=self.cwd,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            result.timeouts += 1
            return self._failed(what, {}, f"perfquery timed out after {self.timeout_s:g} s", result)
        except OSError as err:
            result.exec_error = f"{err.strerror or err}"
            return self._failed(what, {}, f"cannot run perfquery: {err.strerror}", result)
        try:
            parsed, result.iberror = parse_perfquery(proc.stdout, what)
            blocks = _blocks_by_port(parsed, lid, ports, kind, what)
        except MadError as err:
            return self._failed(what, {}, f"unreadable perfquery output: {err}", result)
        if proc.returncode != 0 or len(blocks) < len(ports):
            message = last_message(proc.stdout, proc.stderr)
            return self._failed(
                what, blocks, f"perfquery exited {proc.returncode}: {message}", result
            )
        return blocks, ""

    @staticmethod
    def _failed(
        what: str, blocks: dict[int, CounterBlock], msg: str, result: _Result
    ) -> tuple[dict[int, CounterBlock], str]:
        result.failed += 1
        result.message = msg
        log.warning("%s: %s", what, msg)
        return blocks, msg


def _blocks_by_port(
    blocks: list[CounterBlock], lid: int, ports: list[int], kind: _Kind, source: str
) -> dict[int, CounterBlock]:
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


def _vl_verdict(result: _Result, message: str) -> str:
    """What a failed PortVLXmitWaitCounters process says of its node: "no" (an error
    status), "lost" (no reply to that Get), or "" (something else failed, such as the
    process or ClassPortInfo: nothing learnt)."""
    if _VL_IBERROR not in result.iberror:
        return ""
    if _STATUS_ERROR in message:
        return "no"
    return "lost" if _NO_REPLY in message else ""


def _kind(block: CounterBlock) -> _Kind:
    if block.vl_xmit_wait:
        return "vl"
    return "extended" if block.extended else "basic"


def _table(
    targets: Sequence[Target],
    groups: Sequence[_Group],
    results: Sequence[_Result],
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
                for col, name in zip(VL_WAIT_COLUMNS, _VL_FIELDS, strict=True):
                    cols[col][i] = block.fields[name]
    return pd.DataFrame(cols).astype(sweep_dtypes(vl))


def _cpu_s() -> float:
    """CPU seconds of this process plus its waited-for children (perfquery processes).

    RUSAGE_CHILDREN counts every child of the process, so a sweep that overlaps other
    subprocess work (a lab in the same process) is charged for it too.
    """
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
