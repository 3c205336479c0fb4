"""Observe mode: what ibqos would write into OpenSM's files, shown and kept, never written.

``mode: observe`` runs the whole pipeline (sweeps, classes, plan, rendering, the checker)
and exports every metric, but OpenSM's files stay as they are and OpenSM is never
signalled.  What enforce mode would write goes to ``<state_dir>/observe/``: each file as
it would be, and ``proposed.diff``, unified diffs against the files in place.  A new
proposal is logged once (which files, how many lines); the same proposal again is not, so
a week of observation leaves a readable log.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from pathlib import Path

from ibqos.errors import StateError
from ibqos.fsio import atomic_write
from ibqos.opensm.apply import read_file

log = logging.getLogger(__name__)

OBSERVE_DIR = "observe"
DIFF_FILE = "proposed.diff"


def file_diffs(files: Mapping[Path, str]) -> list[tuple[Path, str]]:
    """For each file, the unified diff from what is on disk to *files* ("": no change)."""
    out = []
    for path, text in files.items():
        old = read_file(path) or ""
        diff = difflib.unified_diff(
            old.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"{path} (now)",
            f"{path} (ibqos would write)",
        )
        out.append((path, "".join(diff)))
    return out


class Observer:
    """Keeps and logs the proposals of observe mode.

    Args:
        state_dir: the agent's state directory; proposals go to its ``observe/``.
    """

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / OBSERVE_DIR
        self._last: str | None = None
        self.pending: tuple[Path, ...] = ()

    def show(self, files: Mapping[Path, str]) -> tuple[Path, ...]:
        """Keep what enforce mode would write; return the files that would change.

        Raises:
            StateError: the proposal cannot be written to the state directory.
        """
        diffs = file_diffs(files)
        self.pending = tuple(path for path, diff in diffs if diff)
        text = "".join(diff for _, diff in diffs)
        if text == self._last:
            return self.pending
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for path, content in files.items():
                atomic_write(self.dir / path.name, content)
            atomic_write(self.dir / DIFF_FILE, text or "# OpenSM's files already match\n")
        except OSError as err:
            raise StateError(f"{self.dir}: cannot keep the proposal: {err.strerror}") from err
        self._last = text
        if self.pending:
            lines = text.splitlines()
            added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
            removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
            names = ", ".join(p.name for p in self.pending)
            log.info(
                "observe: enforce mode would change %s (+%d -%d lines); diff in %s",
                names,
                added,
                removed,
                self.dir / DIFF_FILE,
            )
        else:
            log.info("observe: OpenSM's files already match the plan")
        return self.pending
