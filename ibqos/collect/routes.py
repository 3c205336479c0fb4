"""OpenSM's forwarding tables for the agent: its dump, else ``ibroute`` reads, kept fresh.

:class:`RouteSource` is asked every cycle (:meth:`RouteSource.poll`) and is cheap when
nothing changed:

- **dump** (``fabric.lft_dump``): OpenSM's ``opensm-lfts.dump``, re-read only when its
  mtime, size or inode changed (OpenSM rewrites it after each heavy sweep) or the fabric
  changed; a dump over ``INLINE_DUMP_BYTES`` is read in the background.  OpenSM writes it
  in place, so a read can catch it half-written: that read is a bad file
  (:func:`ibqos.fabric.lfts.read_lft_dump`), and the finished file, whose size differs, is
  read at the next poll.
- **ibroute**: ``ibroute -n LID`` per switch (SMP LinearForwardingTable reads), run in
  the background on ``workers`` threads so a big fabric never holds a cycle up: at first,
  after each fabric change, and every ``refresh_s``.  A poll takes a finished read.

``fabric.routes`` chooses: ``dump``, ``ibroute``, ``off``, or ``auto`` (the dump while it
is configured and readable, else ibroute).  Tables that miss switches of the fabric, a dump
that does not parse, or ibroute failing on a switch: one warning line naming the file (or
switch) and the fault, logged once while it lasts, and the last good tables stay (None
before there were any).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ibqos.collect.diags import find_diag, last_message, run_diag
from ibqos.config.models import ROUTE_SOURCES, FabricConfig
from ibqos.errors import CollectError, StopRequested, TopologyError
from ibqos.fabric.lfts import Tables, missing_switches, parse_ibroute, read_lft_dump
from ibqos.fabric.model import Fabric
from ibqos.fabric.topology import Port

log = logging.getLogger(__name__)

__all__ = ["IbrouteRunner", "RouteSource", "ibroute_runner", "route_source", "switch_lids"]


#: Runs ``ibroute -n LID`` for one switch LID and returns what it printed; raises
#: CollectError naming the LID when it fails.
IbrouteRunner = Callable[[int], str]


def ibroute_runner(
    *, timeout_s: float = 30.0, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> IbrouteRunner:
    """The runner of infiniband-diags' ``ibroute`` (found on *env*'s PATH when first run).

    ``-n``: no destination names, which ibroute would find with more SMPs per LID.
    """
    binary: list[str] = []

    def run(lid: int) -> str:
        if not binary:
            binary.append(find_diag("ibroute", env, CollectError))
        done = run_diag(
            ["ibroute", "-n", str(lid)], binary[0], timeout_s=timeout_s, env=env, cwd=cwd
        )
        if not done.ok:
            out = (done.stdout, done.stderr)
            why = done.message() if done.returncode is None else last_message(*out)
            raise CollectError(f"ibroute -n {lid}: {why}")
        return done.stdout

    return run


#: dumps larger than this (bytes) are read in a background thread: OpenSM's dump of a
#: fabric of thousands of switches is hundreds of MB, tens of seconds to parse
INLINE_DUMP_BYTES = 8 << 20


def _read_dump(dump: Path) -> Tables:
    """Read and parse OpenSM's dump (raises OSError, TopologyError)."""
    return read_lft_dump(dump.read_text(errors="replace"), str(dump))


def route_source(fc: FabricConfig, *, replay: bool = False) -> RouteSource:
    """The forwarding tables' source of a ``fabric`` config section (*replay*: counters
    from a recording, whose fabric has no switches to ask: its dump, if one is given)."""
    mode = fc.routes
    if mode == "auto" and replay:
        mode = "off" if fc.lft_dump is None else "dump"
    # one ibroute run may take as long as one discovery
    run = ibroute_runner(timeout_s=fc.discover_timeout_s)
    return RouteSource(mode, fc.lft_dump, fc.refresh_s, run=run)


def switch_lids(fabric: Fabric) -> list[int]:
    """The LIDs of the fabric's switches (port 0), those that have one."""
    lids = fabric.topo.lids
    return sorted(
        lid for s in fabric.topo.switches() if (lid := lids.get(Port(s.id, 0))) is not None
    )


class RouteSource:
    """The forwarding tables the agent routes by (see the module docstring).

    Args:
        mode: one of :data:`ROUTE_SOURCES`.
        dump: OpenSM's ``opensm-lfts.dump``; None: not configured.
        refresh_s: seconds between two ibroute reads of an unchanged fabric (0: only at
            first and after fabric changes).
        run: the ibroute runner (default: :func:`ibroute_runner`).
        workers: ibroute processes at a time (each is one MAD client; an ibsim lab takes
            ten at most, OpenSM and the counter sweep's included).
        clock: monotonic seconds, for ``refresh_s``.
        wall: seconds since the epoch, for the tables' age.

    Attributes:
        tables: the last good tables, ``{switch LID: {destination LID: out port}}``, or None.
        source: where they came from: "dump", "ibroute", or "none".
        read_s: when they were read, seconds since the epoch (None: never).
        problem: the fault that keeps newer tables out, "" when there is none.
    """

    def __init__(
        self,
        mode: str,
        dump: Path | None,
        refresh_s: float,
        *,
        run: IbrouteRunner | None = None,
        workers: int = 2,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if mode not in ROUTE_SOURCES:
            raise ValueError(f"routes mode {mode!r} is not one of {', '.join(ROUTE_SOURCES)}")
        self.mode = mode
        self.dump = dump
        self.refresh_s = refresh_s
        self._run = run or ibroute_runner()
        self._workers = workers
        self._clock = clock
        self._wall = wall
        self.tables: Tables | None = None
        self.source = "none"
        self.read_s: float | None = None
        self.problem = ""
        self._fabric: Fabric | None = None
        self._stamp: tuple[int, int, int] | None = None  # the dump's (mtime_ns, size, inode)
        self._parsed: Tables | None = None  # the dump as last read, covering or not
        self._pool: ThreadPoolExecutor | None = None
        self._job: dict[int, Future[str]] | None = None  # switch LID -> its ibroute run
        self._dump_read: Future[Tables] | None = None  # a big dump read in the background
        self._started_at: float | None = None  # clock when the last ibroute read started
        self._rerun = False  # the fabric changed while a read ran
        self.last_read_s: float | None = None  # how long the last ibroute read took

    # -- what the agent asks ------------------------------------------------------------------

    def poll(self, fabric: Fabric) -> bool:
        """Bring the tables up to date for *fabric* (a new object means a fabric change).

        Returns:
            True when :attr:`tables` changed (hand them to the decider).
        """
        if self.mode == "off":
            return False
        changed = fabric is not self._fabric
        self._fabric = fabric
        lids = switch_lids(fabric)
        if self._use_dump():
            return self._poll_dump(lids, changed)
        return self._poll_ibroute(lids, changed)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a running ibroute or dump read to finish (tests, scripts)."""
        if self._dump_read is not None:
            self._dump_read.exception(timeout=timeout_s)
        if self._job is not None:
            deadline = None if timeout_s is None else self._clock() + timeout_s
            for future in self._job.values():
                left = None if deadline is None else max(0.0, deadline - self._clock())
                future.exception(timeout=left)

    def close(self) -> None:
        """Cancel ibroute runs not started yet; those running end on their own."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._job = None
        self._dump_read = None

    def status(self) -> dict[str, Any]:
        """What ``ibqos status`` and the metrics show: source, path, switches, age."""
        return {
            "mode": self.mode,
            "source": self.source,
            "path": str(self.dump) if self.source == "dump" else None,
            "switches": len(self.tables or {}),
            "read_s": self.read_s,
            "problem": self.problem or None,
        }

    # -- the dump -----------------------------------------------------------------------------

    def _use_dump(self) -> bool:
        if self.mode == "dump":
            return True
        if self.mode == "ibroute" or self.dump is None:
            return False
        return self.dump.is_file() and os.access(self.dump, os.R_OK)

    def _poll_dump(self, lids: list[int], fabric_changed: bool) -> bool:
        dump = self.dump
        if dump is None:  # mode dump without a path: the config refuses it
            return self._fault("fabric.routes is dump but fabric.lft_dump is not set")
        try:
            st = dump.stat()
        except OSError as err:
            return self._fault(f"{dump}: {err.strerror}")
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        read = self._dump_read
        if read is not None:  # a big dump read in the background
            if not read.done():
                return False
            self._dump_read = None
            if not self._parse(dump, read.result):
                return False
        elif stamp != self._stamp:
            self._stamp = stamp  # taken before reading: a write under way changes it again
            if st.st_size > INLINE_DUMP_BYTES:  # tens of seconds to parse: not in the cycle
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="routes")
                self._dump_read = self._pool.submit(_read_dump, dump)
                log.info("routes: reading %s (%d MB) in the background", dump, st.st_size >> 20)
                return False
            if not self._parse(dump, lambda: _read_dump(dump)):
                return False
        elif not fabric_changed and self.source == "dump":
            return False
        if self._parsed is None:  # the same bad file as before
            return False
        return self._take(self._parsed, "dump", lids, str(dump))

    def _parse(self, dump: Path, read: Callable[[], Tables]) -> bool:
        """Keep what *read* gives as the parsed dump; False (and the fault logged) when it
        raises."""
        try:
            self._parsed = read()
        except OSError as err:
            self._parsed = None
            return self._fault(f"{dump}: {err.strerror}")
        except TopologyError as err:
            self._parsed = None
            return self._fault(str(err))
        return True

    # -- ibroute ------------------------------------------------------------------------------

    def _poll_ibroute(self, lids: list[int], fabric_changed: bool) -> bool:
        changed = False
        if self._job is not None and all(f.done() for f in self._job.values()):
            changed = self._finish(lids)
        now = self._clock()
        due = (
            self._started_at is None
            or fabric_changed
            or self._rerun
            or (self.refresh_s > 0 and now - self._started_at >= self.refresh_s)
        )
        if not due:
            return changed
        if self._job is not None:  # still reading: read again once it is done
            self._rerun = self._rerun or fabric_changed
            return changed
        self._start(lids)
        return changed

    def _start(self, lids: list[int]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="ibroute")
        self._started_at = self._clock()
        self._rerun = False
        self._job = {lid: self._pool.submit(self._read_one, lid) for lid in lids}
        log.debug("routes: reading the LFTs of %d switches with ibroute", len(lids))

    def _read_one(self, lid: int) -> str:
        try:
            return self._run(lid)
        except StopRequested as err:  # the daemon stops: this read is not wanted any more
            raise CollectError(f"ibroute -n {lid}: stopped") from err

    def _finish(self, lids: list[int]) -> bool:
        """Take a finished ibroute read."""
        job, self._job = self._job, None
        assert job is not None and self._started_at is not None
        self.last_read_s = self._clock() - self._started_at
        tables: Tables = {}
        failed: list[str] = []
        for lid, future in job.items():
            err = future.exception()
            if err is not None:
                failed.append(str(err))
                continue
            try:
                got, table = parse_ibroute(future.result(), f"ibroute -n {lid}")
            except TopologyError as bad:
                failed.append(str(bad))
                continue
            if got != lid:
                failed.append(f"ibroute -n {lid}: answered for switch Lid {got}")
                continue
            tables[lid] = table
        if failed:
            return self._fault(
                f"ibroute: {len(failed)} of {len(job)} switches not read, first: {failed[0]}"
            )
        log.info("routes: ibroute read %d switches in %.2f s", len(tables), self.last_read_s)
        return self._take(tables, "ibroute", lids, "ibroute")

    # -- both ---------------------------------------------------------------------------------

    def _take(self, tables: Tables, source: str, lids: list[int], what: str) -> bool:
        """Use *tables* if they cover every switch of the fabric."""
        missing = missing_switches(tables, lids)
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            return self._fault(
                f"{what}: no table for {len(missing)} of the fabric's {len(lids)} switches"
                f" (LID {shown})"
            )
        if self.problem:
            log.info("routes: %s tables read again (%d switches)", source, len(tables))
        self.problem = ""
        self.read_s = self._wall()
        if tables == self.tables and source == self.source:
            return False
        if source != self.source:
            log.info("routes: from %s (%d switches)", what, len(tables))
        self.tables = tables
        self.source = source
        return True

    def _fault(self, message: str) -> bool:
        """Log *message* once while it lasts; the last good tables stay.  Returns False."""
        if message != self.problem:
            kept = (
                f"keeping the last good tables ({self.source}, {len(self.tables)} switches)"
                if self.tables is not None
                else "no routes until then (attribution splits by subtree)"
            )
            log.warning("routes: %s; %s", message, kept)
        self.problem = message
        return False
