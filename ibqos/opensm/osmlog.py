"""What OpenSM's log says after a reload: the sweep's end, errors, and warnings.

OpenSM logs every line as ``Nov 22 10:00:00 123456 [7F1C2B3A] 0x01 -> func: text``; the
time prefix is stripped from what ibqos reports, so that the same error reads the same at
every reload (and is logged once).

Which of OpenSM's QoS errors are fatal was read in its source (``osm_qos_parser_y.y``,
``osm_qos_policy.c``, ``osm_subnet.c`` of linux-rdma/opensm):

- fatal, the whole policy is dropped (every path falls back to the default SL): AC01
  (the file cannot be opened), AC02 "Failed opening", AC03 (parse failed, after AC05
  syntax errors), AC04 (validation failed, after AC10-AC13), AC06 (no file name);
- **not** fatal, logged and parsing goes on: AC14 (a ``pkey`` in a match rule with no
  such partition: the rule stays, only its SL is not checked against the partition's),
  AC02 "pkey 0x.... - partition doesn't exist" (a ``pkey`` of a non-IPoIB ULP rule), and
  ``Unrecognized token`` (an unknown opensm.conf key, skipped; OpenSM prints it on stdout
  and to syslog, not in its log).  An IPoIB ULP rule's pkey with no partition is a syntax
  error (AC05 + AC03), so it is fatal.

ibqos writes no ``pkey``, so a warning is about the admin's own lines: it is reported once
(:class:`ibqos.opensm.apply.Applier`), and does not fail an apply.

The log is followed across rotations (:class:`LogFollower`) by file, not by name: a mark
records each file's (device, inode) and where it ended.  How sites rotate it, and what
OpenSM 3.3.23 does then (``main.c``, ``osm_log.c``):

- renamed, with or without an empty file created in its place, and OpenSM not told: OpenSM
  writes on into the renamed file (it holds it open, and SIGHUP does not reopen its log),
  so the file ibqos held open since its last look is read on, and the new one too;
- renamed, then SIGUSR1 (Debian's logrotate ``postrotate``): OpenSM's manager loop closes
  its log and opens the path again, appending (``osm_log_reopen_file``); the lines written
  before the reopen are in the renamed file (kept open: read even once ``compress`` has
  removed it), the rest in the new one, read from its start;
- copied, then truncated in place (``copytruncate``): the same file, shorter; it is read
  from its start, and what was written between the mark and the copy from the copy
  (``<log>.1`` or ``<log>-<date>``, told by the bytes before the mark).  What OpenSM wrote
  between the copy and the truncation is lost to every reader: the report says so
  (:attr:`LogReport.truncated`).  OpenSM's own ``log_max_size`` truncation is the same case.

A renamed file is let go once the file at the path has lines (OpenSM opened it, on SIGUSR1
or a restart) and it stopped growing.  A log renamed away without a reopen before ibqos first
looked is found through OpenSM's open files in /proc, when its pid is known and /proc may be
read (root, or OpenSM's user); otherwise it cannot be: ibqos never had it open.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

#: OpenSM logs this at the end of every heavy sweep (``osm_state_mgr.c``).
SWEEP_DONE = "SUBNET UP"
#: where a message ibqos looks at starts within a line
_MARK = re.compile(r"ERR AC[0-9A-F]{2}:|Unrecognized token")
#: the parser's words on stderr, where they have no ERR code (a log that is OpenSM's
#: stdout and stderr); within an ERR AC04 line they are part of its message
_STDERR = re.compile(r"Error in QoS Policy File|Error\(s\) in QoS policy")
#: a following log line's time prefix (AC02's message has no newline: the next line
#: runs on after it)
_NEXT_PREFIX = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d+ \[[0-9A-Fa-f]+\].*$")
_NON_FATAL = re.compile(
    r"^(ERR AC14:|ERR AC02: pkey 0x[0-9A-Fa-f]+ - partition doesn't exist|Unrecognized token)"
)
_LINE = re.compile(r"\(line (\d+):\d+\)")
_FILE = re.compile(r"QoS policy file \(([^)]+)\)|Failed opening QoS policy file \(?([^\s)]+)")


@dataclass(frozen=True)
class LogReport:
    """What OpenSM logged since a point.

    Attributes:
        swept: a heavy sweep ended (``SUBNET UP``).
        errors: fatal messages, time prefix stripped, in order.
        warnings: messages OpenSM goes on after (see the module docstring).
        truncated: the log was truncated in place since the point (``copytruncate``): what
            OpenSM wrote between the copy and the truncation is lost, the sweep's end may be
            among it.
    """

    swept: bool = False
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    truncated: bool = False


def messages(text: str) -> tuple[list[str], list[str]]:
    """The fatal errors and the warnings in log *text*, each without its time prefix."""
    errors: list[str] = []
    warnings: list[str] = []
    for line in text.splitlines():
        marks = [m.start() for m in _MARK.finditer(line)]
        if not marks:
            marks = [m.start() for m in _STDERR.finditer(line)][:1]
        if not marks:
            continue
        for start, end in zip(marks, [*marks[1:], len(line)], strict=True):
            message = _NEXT_PREFIX.sub("", line[start:end]).strip()
            (warnings if _NON_FATAL.match(message) else errors).append(message)
    return errors, warnings


def where(errors: Sequence[str]) -> str | None:
    """``<file>:<line>`` of the first error that names a line (the file when one of the
    errors names it: AC03/AC04 do, AC05 gives the line), or None."""
    line = next((m.group(1) for e in errors if (m := _LINE.search(e))), None)
    found = next((m for e in errors if (m := _FILE.search(e))), None)
    name = Path(found.group(1) or found.group(2)).name if found else None
    if name and line:
        return f"{name}:{line}"
    return name or (f"line {line}" if line else None)


def log_size(path: Path) -> int:
    """The log's size now, bytes (0 when it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def readable(path: Path) -> bool:
    """Whether the log exists and can be read."""
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def read_since(path: Path, offset: int) -> LogReport:
    """What the log gained after byte *offset* (all of it if it was rotated or truncated)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(offset if size >= offset else 0)
            text = fh.read().decode(errors="replace")
    except OSError:
        return LogReport()
    errors, warnings = messages(text)
    return LogReport(SWEEP_DONE in text, tuple(errors), tuple(warnings))


#: bytes before a mark kept to tell a file truncated and written again past the mark from
#: one that only grew, and to find the copy ``copytruncate`` made
_TAIL = 64
#: renamed-away files followed at most (the oldest is let go first)
MAX_RENAMED = 4
#: what a compressed rotation ends with: never read
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".Z")

#: a file: (device, inode)
FileKey = tuple[int, int]


@dataclass(frozen=True)
class LogMark:
    """Where OpenSM's log ended, file by file (:meth:`LogFollower.mark`).

    Attributes:
        ends: (device, inode) -> (size in bytes, the last :data:`_TAIL` bytes before it).
    """

    ends: Mapping[FileKey, tuple[int, bytes]] = field(default_factory=dict)


@dataclass
class _Followed:
    """One file followed: its descriptor, and where it ended when last looked at."""

    fd: int
    end: tuple[int, bytes]


class LogFollower:
    """OpenSM's log at *path*, followed by file across rotations (the module docstring).

    Files stay open between two looks, so that a file renamed away in between is still
    read; at most :data:`MAX_RENAMED` renamed files besides the one at the path.  A
    follower is shared by every user of the same path in the process (:func:`follower`).

    Attributes:
        path: the log's path.
        rotations: rotations seen so far (a new file at the path, or a truncation in place).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rotations = 0
        self._files: dict[FileKey, _Followed] = {}
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._files)

    def mark(self, pid: int | None = None) -> LogMark:
        """Where every followed file ends now (the file at the path opened if new, and with
        OpenSM's *pid* the files it writes under the log's name, :meth:`_adopt`)."""
        with self._lock:
            current = self._track()
            self._let_go(current)
            if pid is not None:
                self._adopt(pid)
            ends = {}
            for key, f in self._files.items():
                end = _end(f.fd)
                if end is None:
                    continue
                self._note_end(f, end)
                ends[key] = end
            return LogMark(ends)

    def read_since(self, mark: LogMark) -> LogReport:
        """What OpenSM logged after *mark*, in every file it may have written to: the
        files followed at the mark from where each ended (from its start if it was
        truncated since, after what its copy holds), files new since from their start."""
        with self._lock:
            self._track()
            chunks: list[bytes] = []
            truncated = False
            for key, f in self._files.items():
                now = _end(f.fd)
                if now is None:
                    continue
                self._note_end(f, now)
                start, tail = mark.ends.get(key, (0, b""))
                if _cut(f.fd, now[0], start, tail):
                    truncated = True
                    chunks.append(self._copy_since(start, tail))
                    start = 0
                chunks.append(_pread_all(f.fd, start, now[0]))
        text = b"".join(chunks).decode(errors="replace")
        errors, warnings = messages(text)
        return LogReport(SWEEP_DONE in text, tuple(errors), tuple(warnings), truncated)

    def close(self) -> None:
        """Let every file go."""
        with self._lock:
            _close_all(self._files)

    # -- the files ------------------------------------------------------------------------

    def _track(self) -> FileKey | None:
        """The file at the path now (opened and followed if new); None: there is none."""
        try:
            st = self.path.stat()
            if (st.st_dev, st.st_ino) in self._files:
                return (st.st_dev, st.st_ino)
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)  # the file opened: it may have been renamed since the stat
        key = (st.st_dev, st.st_ino)
        if key in self._files:
            os.close(fd)
            return key
        if self._files:  # a file was followed before: the log was rotated
            self.rotations += 1
            log.info("OpenSM's log %s is a new file: following it, and the old one", self.path)
        self._files[key] = _Followed(fd, (st.st_size, _tail(fd, st.st_size)))
        return key

    def _let_go(self, current: FileKey | None) -> None:
        """Close the renamed files OpenSM no longer writes: once the file at the path has
        lines (OpenSM opened it: an empty one is logrotate's ``create``), those that did
        not grow since last looked at; and the oldest past :data:`MAX_RENAMED`."""
        if current is None:
            return  # the log is gone (hidden): where OpenSM writes cannot be told
        now = _end(self._files[current].fd)
        opened = now is not None and now[0] > 0
        renamed = [key for key in self._files if key != current]
        drop = set(renamed[: max(0, len(renamed) - MAX_RENAMED)])
        for key in renamed:
            end = _end(self._files[key].fd)
            if opened and (end is None or end[0] == self._files[key].end[0]):
                drop.add(key)
        for key in drop:
            os.close(self._files.pop(key).fd)

    def _adopt(self, pid: int) -> None:
        """Follow the files process *pid* (OpenSM) holds open under the log's name
        (``<log>.1``, ``<log> (deleted)``) that are not followed yet: a log renamed away
        without a reopen before ibqos first looked.  /proc tells, where ibqos may read it
        (root, or OpenSM's user)."""
        names = {str(self.path), str(self.path.resolve())}
        try:
            held = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError as err:
            log.debug("OpenSM's open files (pid %d): %s", pid, err.strerror or err)
            return
        for entry in held:
            try:
                target = str(entry.readlink())
                # <log>.1, <log>-20250101, "<log> (deleted)"; the file at the path is
                # followed anyway
                if not any(
                    target[len(n) : len(n) + 1] in (".", "-", " ")
                    for n in names
                    if target.startswith(n)
                ):
                    continue
                fd = os.open(entry, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            if key in self._files or not stat.S_ISREG(st.st_mode):
                os.close(fd)
                continue
            self._files[key] = _Followed(fd, (st.st_size, _tail(fd, st.st_size)))
            log.info("OpenSM (pid %d) writes its log into %s: following it", pid, target)

    def _note_end(self, f: _Followed, now: tuple[int, bytes]) -> None:
        """Count a truncation in place of *f* since it was last looked at."""
        if _cut(f.fd, now[0], *f.end):
            self.rotations += 1
            log.info("OpenSM's log %s was truncated in place: read from its start", self.path)
        f.end = now

    def _copy_since(self, start: int, tail: bytes) -> bytes:
        """What the copy of a file truncated in place holds past *start*: the rotated file
        beside the log whose bytes before *start* are *tail* (empty: none found)."""
        if not tail:
            return b""
        for path in _rotated(self.path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                size = os.fstat(fd).st_size
                if size >= start and _tail(fd, start) == tail:
                    return _pread_all(fd, start, size)
            finally:
                os.close(fd)
        return b""


def _rotated(path: Path) -> Iterator[Path]:
    """The uncompressed rotated copies of the log at *path*, newest first
    (``<log>.1``, ``<log>-20250101``)."""
    try:
        found = [
            p
            for p in path.parent.iterdir()
            if p.name.startswith((path.name + ".", path.name + "-"))
            and not p.name.endswith(_COMPRESSED)
        ]
    except OSError:
        return
    stamped = []
    for p in found:
        try:
            stamped.append((p.stat().st_mtime, p))
        except OSError:
            continue
    for _, p in sorted(stamped, reverse=True)[:3]:
        yield p


def _end(fd: int) -> tuple[int, bytes] | None:
    """The file's size and its last :data:`_TAIL` bytes; None when it cannot be read."""
    try:
        size = os.fstat(fd).st_size
        return size, _tail(fd, size)
    except OSError:
        return None


def _tail(fd: int, end: int) -> bytes:
    """The :data:`_TAIL` bytes before offset *end*."""
    return os.pread(fd, min(_TAIL, end), max(0, end - _TAIL))


def _cut(fd: int, size: int, start: int, tail: bytes) -> bool:
    """Whether the file (*size* bytes now) was truncated since it ended at *start* with
    *tail*: it is shorter, or its bytes before *start* are no longer *tail*."""
    if size < start:
        return True
    try:
        return bool(tail) and _tail(fd, start) != tail
    except OSError:
        return False


def _pread_all(fd: int, start: int, end: int) -> bytes:
    """Bytes [*start*, *end*) of the file (fewer if it shrank meanwhile)."""
    chunks = []
    while start < end:
        chunk = os.pread(fd, min(end - start, 1 << 20), start)
        if not chunk:
            break
        chunks.append(chunk)
        start += len(chunk)
    return b"".join(chunks)


def _close_all(files: dict[FileKey, _Followed]) -> None:
    for f in files.values():
        try:
            os.close(f.fd)
        except OSError:
            pass
    files.clear()


_followers: weakref.WeakValueDictionary[Path, LogFollower] = weakref.WeakValueDictionary()
_followers_lock = threading.Lock()


def follower(path: Path) -> LogFollower:
    """The follower of the log at *path*, shared while anyone holds it (an agent's applier
    rebuilt on SIGHUP goes on with the files its predecessor held open)."""
    with _followers_lock:
        found = _followers.get(path)
        if found is None:
            found = _followers[path] = LogFollower(path)
        return found
