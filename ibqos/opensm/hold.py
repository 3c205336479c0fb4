"""The hold: OpenSM rejects its own files, so ibqos stops writing until they change.

When OpenSM still reports errors after a rollback, it rejects the files as they were
before ibqos's change too: the fault is in the admin's part, and every new apply would
fail, roll back and fail again (a reload storm).  The applier then holds: it writes and
signals nothing while OpenSM's files on disk are the ones it held on (a SHA-256 of their
contents), and tries once more as soon as they change (the admin edited them).

The hold is kept in ``<state_dir>/opensm-hold.json``, so a restarted agent does not
storm either.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibqos.errors import OpenSMHeld
from ibqos.fsio import atomic_remove, atomic_write
from ibqos.opensm.osmlog import where

log = logging.getLogger(__name__)

#: the hold's file in the state directory
HOLD_FILE = "opensm-hold.json"


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


@dataclass(frozen=True)
class Hold:
    """A hold in force.

    Attributes:
        reason: what OpenSM rejects, one line (for logs, ``ibqos status``, the cycle's error).
        files: OpenSM's files it watches.
        fingerprint: their :func:`fingerprint` when the hold began.
        since_s: UNIX time it began, seconds.
    """

    reason: str
    files: tuple[Path, ...]
    fingerprint: str
    since_s: float

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

    def released(self) -> bool:
        """Whether the files changed since the hold began."""
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
