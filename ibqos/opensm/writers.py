"""Another writer of OpenSM's files: told from ibqos's own writes, held off, let go.

The applier (:mod:`ibqos.opensm.apply`) keeps a :class:`Record` of what ibqos last wrote
to OpenSM's files, or found in force there (:class:`~ibqos.opensm.hold.Written`, one
SHA-256 per file, in ``<state_dir>/opensm-written.json``).  Files on disk that differ from
it, while the files ibqos renders from the disk are exactly it, were rewritten by someone
else: config management that puts back a template without ibqos's blocks, or a tool that
sets one of ibqos's keys again.  Writing them back would cost OpenSM a heavy sweep, undone
at the writer's next run, so the applier holds instead (an outside writer's
:class:`~ibqos.opensm.hold.Hold`, whose module docstring says what ends it).

An admin's edit outside ibqos's blocks gives other rendered files (the edit is in them),
so it is applied, not held; so is a rewrite that lands in the same cycle as a plan change,
which costs one apply before the next rewrite holds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from ibqos.opensm.hold import (
    OUTSIDE,
    QUIET_CAP_S,
    Hold,
    Written,
    digest,
    load_written,
    save_written,
    stamp,
)

log = logging.getLogger(__name__)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


class Record:
    """What ibqos last wrote, and what it decides about another writer.

    Args:
        path: where the record is kept across restarts (None: in this object only).
        quiet_s: seconds the files must stand unchanged after another writer's last
            rewrite before ibqos writes them once more (the first hold; doubled for each
            one that follows within :data:`~ibqos.opensm.hold.QUIET_CAP_S`).

    Attributes:
        writes: rewrites by another writer seen so far (one per apply that found one).
    """

    def __init__(self, path: Path | None, quiet_s: float) -> None:
        self.path = path
        self.quiet_s = quiet_s
        self.writes = 0
        self.written: Written = load_written(path)

    def in_force(self, files: Mapping[Path, str | None], hold: Hold | None) -> bool:
        """The files on disk are *files*: note them as ibqos's; return whether that ends
        an outside writer's *hold* (logged: the template keeps out of ibqos's blocks now,
        or they were put back)."""
        self._note({str(path): digest(text) for path, text in files.items()})
        if hold is None or hold.kind != OUTSIDE:
            return False
        log.warning(
            "OpenSM's files carry ibqos's lines as it writes them again: the hold on the"
            " other writer ends"
        )
        self._note(self.written.files, strikes=0)
        return True

    def remember(self, files: tuple[Path, ...]) -> None:
        """Note *files* as they are on disk after ibqos wrote them (or put them back)."""
        try:
            seen = {str(path): digest(_read(path)) for path in files}
        except OSError as err:  # not known: the next apply cannot tell another writer
            log.debug("cannot read back %s: %s", err.filename, err.strerror or err)
            seen = {}
        self._note(seen)

    def fought(self, files: Mapping[Path, str | None]) -> Hold | None:
        """The hold to begin (counted, logged) when another writer changed what ibqos
        last wrote while ibqos would write exactly that again; None: no such writer."""
        fought = []
        for path, text in files.items():
            mine = self.written.files.get(str(path))
            if mine is not None and digest(text) == mine and digest(_read(path)) != mine:
                fought.append(path)
        if not fought:
            return None
        self.writes += 1
        old = self.written
        strikes = old.strikes + 1 if time.time() - old.released_s < QUIET_CAP_S else 1
        cap = max(self.quiet_s, QUIET_CAP_S)
        self._note(old.files, strikes=strikes)
        return Hold.outside(fought, files, min(self.quiet_s * 2.0 ** (strikes - 1), cap))

    def still_held(self, hold: Hold) -> Hold | None:
        """An outside writer's *hold* as it goes on (a new rewrite seen is counted and
        restarts the quiet period), or None once the files stood unchanged for its quiet
        period: the hold ends (logged) and ibqos writes them once more."""
        now = time.time()
        now_stamp = stamp(hold.files)
        if now_stamp != hold.fingerprint:
            self.writes += 1
            hold = dataclasses.replace(hold, fingerprint=now_stamp, changed_s=now)
        if now - hold.changed_s < hold.quiet_s:
            return hold
        log.warning(
            "OpenSM's files stood unchanged for %g s since another writer last rewrote"
            " them: ibqos writes them once more",
            hold.quiet_s,
        )
        self.written = dataclasses.replace(self.written, released_s=now)
        save_written(self.path, self.written)
        return None

    def _note(self, seen: Mapping[str, str], *, strikes: int | None = None) -> None:
        """Keep *seen* (and *strikes*, None: as they are) as what ibqos wrote."""
        old = self.written
        new = Written(dict(seen), old.strikes if strikes is None else strikes, old.released_s)
        if new != old:
            self.written = new
            save_written(self.path, new)
