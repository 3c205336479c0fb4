"""Which state the OpenSM beside ibqos is in: master, standby, discovering, not active.

On a fabric with two subnet managers only the master sweeps, programs the fabric and
answers the SA; the other one, in STANDBY, polls the master and takes over once the master
stops answering (OpenSM's ``osm_sm_state_mgr.c``: ``sminfo_polling_timeout`` ms between
polls, ``polling_retry_number`` missed polls).  Files written beside a standby OpenSM and a
SIGHUP sent to it change nothing the fabric sees: it does not sweep, so an apply's wait for
``SUBNET UP`` ends in a timeout and a rollback, and the SLs of its policy are not those
the master's SA serves.

:class:`SmStateReader` reads the state from two sources:

- the SMInfo of the local port: ``sminfo -D 0`` sends SubnGet(SMInfo) along the empty
  direct route, to the port itself, and the SM that runs there answers with its GUID,
  priority and SMState (0 NOTACTIVE, 1 DISCOVERING, 2 STANDBY, 3 MASTER, as in the
  SMInfo attribute of the InfiniBand specification).  The port is ``collect.ca``/
  ``collect.port`` (the port ibqos sends its MADs from, the fabric's port on that host);
  where opensm.conf binds OpenSM to a port (``guid``), an answer from an SM with another
  GUID is not OpenSM's.  No answer from OpenSM there (it does not run, or runs on another
  port): plain ``sminfo`` asks the fabric's master, through the SM LID of the port, and a
  master that is not OpenSM means OpenSM does not run the fabric: read as NOTACTIVE;
- OpenSM's log: ``osm_report_sm_state`` logs ``Entering <STATE> state`` at every change,
  at level OSM_LOG_SYS, which OpenSM logs whatever ``log_flags`` say, with the names of
  ``osm_get_sm_mgr_state_str``: NOTACTIVE, DISCOVERING, STANDBY, MASTER.  The log is read
  from where the last read ended (:class:`LogStates`), backwards from its end, so a big
  log costs one bounded scan.

SMInfo is the live answer and wins.  The log serves where SMInfo cannot be read (no
``sminfo``, an SM on another port), but not while OpenSM is known not to run (its last
line then tells of an OpenSM that is gone), and a new state line in it makes the next read
ask SMInfo at once instead of waiting for :data:`EVERY_S`.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ibqos.collect.portinfo import SmpqueryRunner
from ibqos.errors import IbqosError
from ibqos.opensm.conf import parse_conf

log = logging.getLogger(__name__)

#: seconds between two SMInfo reads while they answer; a state line in OpenSM's log (read
#: every cycle) asks again at once, so a change it logs is seen at the next cycle
EVERY_S = 5.0
#: after a read that got no SMInfo answer, SMInfo is asked again only once this many times
#: the read's own duration has passed (and :data:`EVERY_S` at least): unanswered reads
#: (MAD timeouts) take at most a tenth of the agent's time; the log stands in meanwhile,
#: and a new state line in it asks again at once
RETRY_FACTOR = 10.0
#: seconds before ``sminfo`` is looked for again when it cannot be found
NO_TOOL_S = 300.0
#: seconds one ``sminfo`` may take in all; libibmad tries 3 times, a fifth of this each
#: (:class:`~ibqos.collect.portinfo.SmpqueryRunner`)
SMINFO_TIMEOUT_S = 2.0
#: bytes of the log read backwards at most to find its last state line (at start, after
#: a rotation, or when this much was appended since the last read)
MAX_SCAN = 16 << 20
#: bytes read at a time when scanning the log backwards
CHUNK = 1 << 20
#: bytes before where a read ended that the next read compares, to tell a log rewritten
#: in place from one appended to
MARK = 64

#: a state line (group 1: the state) or the end of a heavy sweep (group 1 None)
_LINES = re.compile(rb"\bEntering (NOTACTIVE|DISCOVERING|STANDBY|MASTER) state\b|\bSUBNET UP\b")
_SMINFO = re.compile(
    r"sm guid (0x[0-9a-fA-F]+), activity count \d+ priority (\d+) state (\d+)", re.MULTILINE
)

#: Runs a diag (argv, ``argv[0]`` its name) and returns its stdout; IbqosError on failure.
Runner = Callable[[Sequence[str]], str]


class SmState(enum.IntEnum):
    """SMInfo's SMState: the state of a subnet manager."""

    NOTACTIVE = 0
    DISCOVERING = 1
    STANDBY = 2
    MASTER = 3

    @property
    def label(self) -> str:
        """Its name as the log prints it: ``master``, ``standby``, ``not active``..."""
        return "not active" if self is SmState.NOTACTIVE else self.name.lower()


@dataclass(frozen=True)
class SmReading:
    """The state of the OpenSM beside ibqos, as last read.

    Attributes:
        state: its state; None: not known (no SMInfo answer and nothing in the log, or
            OpenSM not running).
        source: where it came from: ``sminfo``, ``log``, or "" when not known.
        detail: how it was read or why not, for the log (one line).
        guid: the SM's port GUID (SMInfo only).
        priority: the SM's priority (SMInfo only).
    """

    state: SmState | None
    source: str = ""
    detail: str = ""
    guid: int | None = None
    priority: int | None = None

    @property
    def standby(self) -> bool:
        """The state is known and is not MASTER: this OpenSM does not run the fabric."""
        return self.state is not None and self.state is not SmState.MASTER

    def describe(self) -> str:
        """e.g. ``standby (sminfo: priority 5)``, ``unknown (no SMInfo answer ...)``."""
        if self.state is None:
            return f"unknown ({self.detail})" if self.detail else "unknown"
        return f"{self.state.label} ({self.source}{': ' + self.detail if self.detail else ''})"


def parse_sminfo(text: str) -> tuple[SmState, int, int]:
    """(state, GUID, priority) from ``sminfo`` output such as ``sminfo: sm lid 1 sm guid
    0x..., activity count 515 priority 10 state 3 SMINFO_MASTER``.

    Raises:
        IbqosError: no such line, or a state outside 0-3.
    """
    m = _SMINFO.search(text)
    if m is None:
        raise IbqosError(f"sminfo: no SMInfo in its output: {text.strip()[:120]!r}")
    state = int(m.group(3))
    if state not in SmState._value2member_map_:
        raise IbqosError(f"sminfo: unknown SM state {state}")
    return SmState(state), int(m.group(1), 16), int(m.group(2))


def scan(fh: BinaryIO, start: int, end: int, cap: int = MAX_SCAN) -> tuple[SmState | None, bool]:
    """The last state line between byte *start* and *end* of *fh*, read backwards from
    *end* (at most *cap* bytes).

    Returns:
        (the state of the last ``Entering <STATE> state`` line, None: none there;
        whether a ``SUBNET UP`` line comes after it, or anywhere when there is none).
    """
    lowest = max(start, end - cap)
    pos, carry, swept = end, b"", False
    while pos > lowest:
        size = min(CHUNK, pos - lowest)
        pos -= size
        fh.seek(pos)
        data = fh.read(size) + carry
        if pos > lowest:
            # the chunk's first line may begin in the chunk before: scan it with that one
            cut = data.find(b"\n")
            if cut < 0:
                carry = data
                continue
            carry, data = data[: cut + 1], data[cut + 1 :]
        for m in reversed(list(_LINES.finditer(data))):
            if m.group(1) is None:
                swept = True
            else:
                return SmState[m.group(1).decode()], swept
    return None, swept


class LogStates:
    """Follows OpenSM's log for its state lines and sweeps, by inode and byte offset.

    Args:
        path: OpenSM's log.
        cap: bytes scanned backwards at most per read.

    Attributes:
        state: the state of the last state line seen (kept across a rotation whose new
            file has none yet); None: none seen.
        swept: a heavy sweep ended (``SUBNET UP``) after that line: a new master has
            programmed the fabric and its SA answers.
    """

    def __init__(self, path: Path, cap: int = MAX_SCAN) -> None:
        self.path = path
        self.cap = cap
        self.state: SmState | None = None
        self.swept = False
        self._inode: int | None = None
        self._offset = 0
        self._mark = b""  # the bytes just before _offset, as read then

    def poll(self) -> bool:
        """Read what the log gained; True when it has a new state line (then
        :attr:`state` is that line's state).  A log that cannot be read changes nothing.

        A log replaced (another inode), truncated, or rewritten (the bytes before where the
        last read ended are not those read then: copied-and-truncated, then grown past
        that point) is read from its start.
        """
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                same = st.st_ino == self._inode and st.st_size >= self._offset
                if same and self._mark:
                    fh.seek(self._offset - len(self._mark))
                    same = fh.read(len(self._mark)) == self._mark
                start = self._offset if same else 0
                found, swept = scan(fh, start, st.st_size, self.cap)
                fh.seek(max(0, st.st_size - MARK))
                self._mark = fh.read(MARK)
        except OSError:
            return False
        self._inode, self._offset = st.st_ino, st.st_size
        if found is None:
            self.swept = self.swept or swept
            return False
        self.state, self.swept = found, swept
        return True


class SmStateReader:
    """Reads the state of the OpenSM beside ibqos (module docstring), at most every
    :data:`EVERY_S` seconds while SMInfo answers, less often while it does not
    (:data:`RETRY_FACTOR`); a new state line in OpenSM's log asks again at once.

    Args:
        log_path: OpenSM's log.
        conf: opensm.conf (its ``guid``, when set, is the port OpenSM runs on).
        ca: CA to read SMInfo from (``sminfo -C``); None: the default one.
        port: its port (``sminfo -P``); 0: the default one.
        alive: whether OpenSM runs (True, False, None: cannot tell); while it is known
            not to run the log is not used.
        runner: runs ``sminfo`` (None: the installed one; when it cannot be found,
            SMInfo is never asked and the log alone is read).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        log_path: Path,
        conf: Path | None = None,
        *,
        ca: str | None = None,
        port: int = 0,
        alive: Callable[[], bool | None] = lambda: None,
        runner: Runner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = LogStates(log_path)
        self.conf = conf
        self.alive = alive
        self.clock = clock
        self.argv = ["sminfo"]
        if ca is not None:
            self.argv += ["-C", ca]
        if port:
            self.argv += ["-P", str(port)]
        self._runner = runner
        self._no_tool = ""  # why sminfo cannot be run
        self._tool_due = float("-inf")  # when it is looked for again
        self.last: SmReading | None = None
        self._due = float("-inf")

    def read(self) -> SmReading:
        """The state now (the last reading while it is recent enough)."""
        now = self.clock()
        changed = self.log.poll()
        if self.last is not None and not changed and now < self._due:
            return self.last
        answer = self._sminfo()
        took = self.clock() - now
        if isinstance(answer, SmReading):
            reading, self._due = answer, now + EVERY_S
        else:
            reading = self._from_log(answer)
            self._due = now + max(EVERY_S, RETRY_FACTOR * took)
        self.last = reading
        return reading

    def swept(self) -> bool | None:
        """Whether OpenSM's log shows a heavy sweep's end after its last state line (a new
        master's SA answers once it has); None: the log has no state line."""
        return None if self.log.state is None else self.log.swept

    def _sminfo(self) -> SmReading | str:
        """What SMInfo says of OpenSM, or why it says nothing.

        The SM on OpenSM's port answers for itself.  When none answers there (OpenSM does
        not run, or runs on another port), the fabric's master is asked (through the SM
        LID of the port): a master that is not OpenSM means OpenSM does not run the fabric,
        whatever it does, and is read as NOTACTIVE.
        """
        runner = self._runner
        if runner is None:
            if self.clock() < self._tool_due:
                return self._no_tool
            try:
                runner = self._runner = SmpqueryRunner(SMINFO_TIMEOUT_S, binary="sminfo")
            except IbqosError as err:  # not installed (yet): looked for again later
                self._no_tool, self._tool_due = str(err), self.clock() + NO_TOOL_S
                return self._no_tool
        bound = self._bound_guid()
        try:
            state, guid, priority = parse_sminfo(runner([*self.argv, "-D", "0"]))
        except IbqosError as err:
            mine = "no SM answers on this port"
            why = f"{mine}: {err}"
        else:
            if bound is None or guid == bound:
                return SmReading(state, "sminfo", f"priority {priority}", guid, priority)
            mine = why = f"the SM on this port ({guid:#018x}) is not OpenSM's ({bound:#018x})"
        try:
            state, guid, priority = parse_sminfo(runner(self.argv))
        except IbqosError:
            return why
        if state is not SmState.MASTER:
            return why
        if guid == bound:
            return SmReading(state, "sminfo", f"the master, priority {priority}", guid, priority)
        # whatever OpenSM does (not running, on another port), another SM runs the fabric
        detail = f"{mine}; the master is {guid:#018x}, priority {priority}"
        return SmReading(SmState.NOTACTIVE, "sminfo", detail, guid, priority)

    def _from_log(self, why: str) -> SmReading:
        """The log's last state (SMInfo gave none: *why*), unless OpenSM is not running."""
        if self.alive() is False:
            return SmReading(None, detail=f"OpenSM is not running; {why}")
        if self.log.state is None:
            return SmReading(None, detail=f"{why}; no state line in {self.log.path}")
        return SmReading(self.log.state, "log", f"its last state line; {why}")

    def _bound_guid(self) -> int | None:
        """The port GUID opensm.conf binds OpenSM to (``guid``), None when unset or 0."""
        if self.conf is None:
            return None
        try:
            value = parse_conf(self.conf.read_text(errors="replace")).get("guid", "")
            guid = int(value, 0)
        except (OSError, ValueError):
            return None
        return guid or None
