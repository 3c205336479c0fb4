"""The hold: ibqos stops writing OpenSM's files while writing them would only fight.

Two faults hold, each for a reason of its own (:attr:`Hold.kind`):

- **rejected**: OpenSM still reports errors after a rollback, so it rejects the files as
  they were before ibqos's change too: the fault is in the admin's part, and every new
  apply would fail, roll back and fail again (a reload storm).  The applier writes and
  signals nothing while OpenSM's files on disk are the ones it held on (a SHA-256 of their
  contents), and tries once more as soon as they change (the admin edited them).
- **outside**: another writer (config management: Ansible, Puppet, Salt) rewrites
  OpenSM's files with a template that lacks ibqos's lines.  Each ibqos rewrite would cost
  OpenSM a heavy sweep and be undone at the writer's next run.  The applier writes and
  signals nothing until one of: the files carry ibqos's lines as it would write them again
  (nothing is pending: the admin's template now keeps out of ibqos's blocks); the files
  stand unchanged for the quiet period (``opensm.outside_quiet_s``), after which ibqos
  writes them once more (a writer back within an hour of that doubles the next quiet
  period, up to an hour); ``ibqos restore`` (with the agent stopped), which ends every hold.  A
  rewrite is seen by its content, inode or modification time (:func:`stamp`), so a writer
  that puts the same bytes back every few seconds keeps the hold too.

The applier tells ibqos's own writes from another writer's by what it last wrote or found
in force (:class:`Written`, one SHA-256 per file): the files on disk differ from it, while
the files as ibqos would render them from the disk are exactly it (the other writer changed
only ibqos's lines, or put back a template without them).  An admin's edit outside ibqos's
blocks gives other rendered files, and is not taken for a writer.

The hold is kept in ``<state_dir>/opensm-hold.json`` and the record of what ibqos wrote in
``<state_dir>/opensm-written.json``, so a restarted agent does not storm either.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibqos.errors import OpenSMHeld
from ibqos.fsio import atomic_remove, atomic_write
from ibqos.opensm.osmlog import where

log = logging.getLogger(__name__)

#: the hold's file in the state directory
HOLD_FILE = "opensm-hold.json"
#: the record of what ibqos last wrote (or found in force), in the state directory
WRITTEN_FILE = "opensm-written.json"
#: :attr:`Hold.kind`: OpenSM rejects its own files
REJECTED = "rejected"
#: :attr:`Hold.kind`: another writer rewrites OpenSM's files
OUTSIDE = "outside"
#: seconds: the longest quiet period an outside writer's hold asks for, however often
#: the writer came back; also how long after a hold a new one counts as a repeat
QUIET_CAP_S = 3600.0


def fingerprint(paths: Iterable[Path]) -> str:
    """SHA-256 over the contents of *paths* (a missing or unreadable file counts as such)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path).encode() + b"\0")
        try:
            digest.update(b"+" + path.read_bytes())
        except FileNotFoundError:
            digest.update(b"-absent")
        except OSError as err:
            digest.update(f"-unreadable {err.errno}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def stamp(paths: Iterable[Path]) -> str:
    """:func:`fingerprint` with each file's inode and modification time (ns) too: it
    changes at every rewrite, even one that puts the same bytes back."""
    digest = hashlib.sha256(fingerprint(paths).encode())
    for path in sorted(paths):
        try:
            st = path.stat()
        except OSError as err:
            digest.update(f"{path}-{err.errno}".encode())
            continue
        digest.update(f"{path}:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}".encode())
    return digest.hexdigest()


def digest(text: str | None) -> str:
    """SHA-256 of a file's text ("absent" for no file), as :class:`Written` keeps it."""
    return "absent" if text is None else hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Written:
    """What ibqos last wrote to OpenSM's files, or found in force there.

    Attributes:
        files: file path -> :func:`digest` of its text.
        strikes: outside writers' holds in a row (each doubles the next quiet period).
        released_s: UNIX time the last outside writer's hold ended after its quiet period,
            seconds (0: never); a writer back within :data:`QUIET_CAP_S` of it is a repeat.
    """

    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    strikes: int = 0
    released_s: float = 0.0

    def to_doc(self) -> dict[str, Any]:
        return {"files": dict(self.files), "strikes": self.strikes, "released_s": self.released_s}


def load_written(path: Path | None) -> Written:
    """The record kept in *path* (empty: no path, no file, or one that cannot be read,
    which is logged: outside writers are then told from the next write on)."""
    if path is None:
        return Written()
    try:
        doc = json.loads(path.read_text())
        files = {str(k): str(v) for k, v in dict(doc["files"]).items()}
        return Written(files, int(doc.get("strikes", 0)), float(doc.get("released_s", 0.0)))
    except FileNotFoundError:
        return Written()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("%s: cannot read what ibqos last wrote (%s); starting afresh", path, err)
        return Written()


def save_written(path: Path | None, written: Written) -> None:
    """Keep *written* in *path* (best effort: a failure is logged, and the record still
    holds in this process)."""
    if path is None:
        return
    try:
        atomic_write(path, json.dumps(written.to_doc(), indent=1) + "\n")
    except OSError as err:
        log.warning("%s: cannot keep what ibqos wrote (%s)", path, err.strerror or err)


@dataclass(frozen=True)
class Hold:
    """A hold in force.

    Attributes:
        reason: why ibqos holds, one line (for logs, ``ibqos status``, the cycle's error).
        files: OpenSM's files it watches.
        fingerprint: their :func:`fingerprint` when the hold began (a rejected hold), or
            their :func:`stamp` when another writer last changed them (an outside one).
        since_s: UNIX time it began, seconds.
        kind: :data:`REJECTED` or :data:`OUTSIDE` (the module docstring).
        quiet_s: an outside hold: seconds the files must stand unchanged before ibqos
            writes them once more.
        changed_s: an outside hold: UNIX time the other writer was last seen, seconds.
    """

    reason: str
    files: tuple[Path, ...]
    fingerprint: str
    since_s: float
    kind: str = REJECTED
    quiet_s: float = 0.0
    changed_s: float = 0.0

    @classmethod
    def begin(cls, reason: str, files: Iterable[Path]) -> Hold:
        """A hold on *files* as they are on disk now."""
        paths = tuple(sorted(files))
        return cls(reason, paths, fingerprint(paths), time.time())

    @classmethod
    def after_rollback(cls, errors: Sequence[str], files: Iterable[Path]) -> Hold:
        """The hold when OpenSM still reports *errors* (fatal, stripped) after a rollback
        of *files*; logged once, with the file and line OpenSM names."""
        paths = tuple(sorted(files))
        names = ", ".join(p.name for p in paths)
        at = where(errors)
        reason = (
            f"OpenSM rejects {names} as they were before ibqos's change too"
            f"{f' ({at})' if at else ''}: {errors[0]}"
        )
        log.error(
            "%s%s; holding: ibqos writes and signals nothing until %s change",
            reason,
            "".join(f"; {e}" for e in errors[1:5]),
            names,
        )
        return cls.begin(reason, paths)

    @classmethod
    def outside(cls, fought: Sequence[Path], files: Iterable[Path], quiet_s: float) -> Hold:
        """The hold when another writer changed ibqos's lines in *fought* (of *files*);
        logged once, with what to do."""
        paths = tuple(sorted(files))
        now = time.time()
        reason = (
            f"OpenSM's files are being rewritten by another writer"
            f" ({', '.join(p.name for p in fought)}: ibqos's lines changed or gone)"
        )
        log.error(
            "%s: keep ibqos's managed blocks out of its template (docs/deploy.md); ibqos"
            " holds, writing and signalling nothing, until the files carry its blocks again"
            " or stand unchanged for %g s",
            reason,
            quiet_s,
        )
        return cls(reason, paths, stamp(paths), now, OUTSIDE, quiet_s, now)

    def until(self) -> str:
        """What ends the hold, for ``ibqos status``."""
        names = ", ".join(str(p) for p in self.files)
        if self.kind == OUTSIDE:
            return (
                f"{names} carry its blocks again or stand unchanged for {self.quiet_s:g} s"
                " (or ibqos restore)"
            )
        return f"{names} change"

    def released(self) -> bool:
        """Whether the files changed since the hold began (a rejected hold; an outside
        writer's hold ends only by the agent's own look, :mod:`ibqos.opensm.apply`)."""
        if self.kind == OUTSIDE:
            return False
        return fingerprint(self.files) != self.fingerprint

    def check(self) -> None:
        """Return if the files changed since the hold began (logged: the caller tries
        once more and drops the hold).

        Raises:
            OpenSMHeld: they did not; nothing is to be written.
        """
        if not self.released():
            raise OpenSMHeld(f"held, nothing written: {self.reason}")
        log.warning(
            "%s changed since ibqos held (%s): trying once more",
            ", ".join(p.name for p in self.files),
            self.reason,
        )

    def to_doc(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "files": [str(p) for p in self.files],
            "fingerprint": self.fingerprint,
            "since_s": self.since_s,
            "kind": self.kind,
            "quiet_s": self.quiet_s,
            "changed_s": self.changed_s,
        }


def load_hold(path: Path | None) -> Hold | None:
    """The hold kept in *path* (None: no file, no path, or one that cannot be read,
    which is logged: then the next failing apply holds again)."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        return Hold(
            str(doc["reason"]),
            tuple(Path(p) for p in doc["files"]),
            str(doc["fingerprint"]),
            float(doc["since_s"]),
            str(doc.get("kind", REJECTED)),
            float(doc.get("quiet_s", 0.0)),
            float(doc.get("changed_s", 0.0)),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("%s: cannot read the hold kept there (%s); not holding", path, err)
        return None


def save_hold(path: Path | None, hold: Hold | None) -> None:
    """Keep *hold* in *path*, or remove the file when None (best effort: a failure is
    logged, and the hold still holds in this process)."""
    if path is None:
        return
    try:
        if hold is None:
            atomic_remove(path)
        else:
            atomic_write(path, json.dumps(hold.to_doc(), indent=1) + "\n")
    except OSError as err:
        log.warning("%s: cannot keep the hold (%s)", path, err.strerror or err)
