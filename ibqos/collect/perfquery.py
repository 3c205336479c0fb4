"""Counter backend that runs infiniband-diags' ``perfquery`` and parses what it prints.

``perfquery -x LID PORTS`` reads PortCountersExtended (64-bit data and packet counters);
``perfquery LID PORTS`` reads PortCounters, whose PortXmitWait is the only XmitWait a PMA
without CapabilityMask2 bit 1 has (docs/design.md §7.3-7.5).  Both print one block per port::

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
simulated link adds to the data counters it crosses (docs/design.md §8.3), which ``stats["mads"]``
lets a caller bound.

A process that fails (non-zero exit, timeout, output that does not parse) fails only the
rows it did not print: ``perfquery`` stops at the first port that does not answer, and the
blocks printed before it are complete readings.  Each failed row's ``error`` names the LID,
the port and perfquery's last message: its last stderr line (``ibwarn``/``ibpanic``), else
the ``perfquery: iberror: ...`` line it prints on stdout.  ibsim accepts ten clients at
most (OpenSM is one); a client beyond that fails at once with ``ibpanic: ... sim_init:
connect failed``, so keep ``workers`` at six or below on a lab.

Bounds.  Each process runs at most ``timeout_s``; with *sweep_timeout_s* the whole sweep
ends by then as well: a process is given only what is left of it, and one not started by
then is not run (its rows fail with ``not read: the sweep's time limit passed``).  Every
process runs through :func:`ibqos.tools.run_tool`, so the tool runner's waiter is called
while it runs, and a stop it requests kills it.  Failures are logged per process at debug
level; the collection loop says in one line how many ports a sweep reached.

Data counters are converted to bytes here (x 4).  A PortXmitData above (2^64 - 1) / 4 words
saturates at 2^64 - 1 bytes, as the counter itself would (decades at today's link rates).
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ibqos.collect.diags import find_diag, last_message, run_diag
from ibqos.collect.perfquery_parse import NO_DEVICE, CounterBlock, parse_perfquery
from ibqos.collect.perfquery_plan import (
    Group,
    GroupResult,
    Kind,
    blocks_by_port,
    command,
    make_groups,
    sweep_table,
    vl_verdict,
)
from ibqos.collect.sweep import Sweep
from ibqos.errors import CollectError, MadError
from ibqos.fabric.targets import Target

log = logging.getLogger(__name__)

# CounterBlock, last_message and parse_perfquery live in the modules that parse and run
# diags; this module's path keeps naming them
__all__ = [
    "PerfqueryBackend",
]

#: sweeps between two probes of a node whose PortVLXmitWaitCounters got no reply
REPROBE_SWEEPS = 10


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
        sweep_timeout_s: seconds a sweep may take (module docstring); None: no limit
            but each process's own.

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
        sweep_timeout_s: float | None = None,
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
        self.sweep_timeout_s = sweep_timeout_s
        self._deadline: float | None = None  # of the sweep under way (monotonic seconds)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.extra_args = list(extra_args)
        self.binary = find_diag(binary, self.env, CollectError)
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
            BaseException: whatever the tool runner's waiter raises (StopRequested).
        """
        targets = list(targets)
        started = time.time()
        t0 = time.monotonic()
        limit = self.sweep_timeout_s
        self._deadline = None if limit is None else t0 + limit
        cpu0 = _cpu_s()
        self._sweeps += 1
        for guid, due in list(self._vl_due.items()):
            if due <= self._sweeps:  # its VL probe got no reply a while ago: try again
                del self._vl_due[guid]
                self._vl_known.pop(guid, None)
        groups = make_groups(targets, self.per_switch)
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
        if self.xmit_wait:
            lost = [m for r in results for p, m in r.errors.items() if p in r.extended]
            if lost:  # the rows stand, so the loop's summary does not count these
                log.warning(
                    "XmitWait (PortCounters) of %d ports not read, their data counters "
                    "stand (first: %s)",
                    len(lost),
                    lost[0],
                )
        vl_lost = [m for r in results for m in r.vl_lost]
        if vl_lost:
            log.warning(
                "PortVLXmitWaitCounters of %d ports not read, their per-VL columns are "
                "empty (first: %s)",
                len(vl_lost),
                vl_lost[0],
            )
        table = sweep_table(targets, groups, results, self.xmit_wait, self.vl_xmit_wait)
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
            mono_s=_row_times(targets, groups, results),
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

    def _read_group(self, group: Group) -> GroupResult:
        result = GroupResult()
        result.extended = self._read(group.lid, group.ports, "extended", result)
        result.time_s, result.mono_s = time.time(), time.monotonic()
        read = [p for p in group.ports if p in result.extended]
        if self.xmit_wait and read:
            result.basic = self._read(group.lid, read, "basic", result, "PortCounters: ")
        if self.vl_xmit_wait and read:
            self._read_vl(group, read, result)
        return result

    def _read_vl(self, group: Group, ports: list[int], result: GroupResult) -> None:
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
                continue
            if known is None and not result.vl_verdict:
                verdict = vl_verdict(result, msg)
                if verdict:  # the node's first answer says it has none: skip the rest
                    result.vl_verdict, result.vl_message = verdict, msg
                    return
            result.vl_lost.append(f"lid {group.lid} port {port}: {msg}")

    def _vl_learn(self, groups: Sequence[Group], results: Sequence[GroupResult]) -> None:
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
        self, lid: int, ports: list[int], kind: Kind, result: GroupResult, label: str = ""
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
        self, lid: int, ports: list[int], kind: Kind, result: GroupResult
    ) -> tuple[dict[int, CounterBlock], str]:
        """Run one process: the blocks it printed by port, and what went wrong ("" if not)."""
        argv, what = command(self.extra_args, kind, lid, ports)
        timeout_s = self.timeout_s
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                return self._failed(what, {}, "not read: the sweep's time limit passed", result)
            timeout_s = min(timeout_s, left)
        result.processes += 1
        result.mads += 1 + len(ports)  # Get(ClassPortInfo), then one Get per port
        result.iberror = ""  # this process's, once its output is parsed
        proc = run_diag(argv, self.binary, timeout_s=timeout_s, env=self.env, cwd=self.cwd)
        if proc.timed_out:
            result.timeouts += 1
            if timeout_s < self.timeout_s:
                msg = f"perfquery cut at the sweep's time limit ({self.sweep_timeout_s:g} s)"
            else:
                msg = f"perfquery timed out after {self.timeout_s:g} s"
            return self._failed(what, {}, msg, result)
        if proc.exec_error is not None:
            result.exec_error = proc.reason
            return self._failed(what, {}, f"cannot run perfquery: {proc.reason}", result)
        try:
            parsed, result.iberror = parse_perfquery(proc.stdout, what)
            blocks = blocks_by_port(parsed, lid, ports, kind, what)
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
        what: str, blocks: dict[int, CounterBlock], msg: str, result: GroupResult
    ) -> tuple[dict[int, CounterBlock], str]:
        result.failed += 1
        result.message = msg
        log.debug("%s: %s", what, msg)  # the rows say it; the loop sums them up
        return blocks, msg


def _cpu_s() -> float:
    """CPU seconds of this process plus its waited-for children (perfquery processes).

    RUSAGE_CHILDREN counts every child of the process, so a sweep that overlaps other
    subprocess work (a lab in the same process) is charged for it too.
    """
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _row_times(
    targets: Sequence[Target], groups: Sequence[Group], results: Sequence[GroupResult]
) -> np.ndarray:
    """Per target, the monotonic time its group's data counters were read (NaN where its
    port was not)."""
    out = np.full(len(targets), np.nan)
    for group, res in zip(groups, results, strict=True):
        for i in group.rows:
            if targets[i].port in res.extended:
                out[i] = res.mono_s
    return out
