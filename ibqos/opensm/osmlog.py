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
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
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
    """

    swept: bool = False
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


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
