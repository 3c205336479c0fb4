"""How one apply of OpenSM's files ended (:class:`ibqos.opensm.apply.Applier`).

:class:`ApplyOutcome` names the ending, one of seven; :class:`ApplyResult` holds it with
the files written, the problems, the timings and OpenSM's warnings, and gives the one line
the log and ``ibqos status`` show (:meth:`ApplyResult.summary`) and the record the state
file keeps (:meth:`ApplyResult.to_doc`).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: seconds waited after a signal when OpenSM's log cannot be read (no sweep line to see)
SETTLE_S = 2.0


class ApplyOutcome(enum.Enum):
    """How one apply ended.  The last three are failures, after which the previous files
    are put back (:attr:`ApplyResult.rolled_back` says whether that worked)."""

    #: every file already had the rendered content: nothing written, OpenSM not signalled
    UNCHANGED = "unchanged"
    #: the changed files were written; no way to signal OpenSM is configured, so it reads
    #: them when it next re-reads its files (not verified)
    WRITTEN = "written"
    #: OpenSM ended its heavy sweep without a fatal error and the verifier passed
    VERIFIED = "verified"
    #: OpenSM ended its heavy sweep without a fatal error (or, without a log, the settle
    #: time passed); not verified: no verifier is configured, or ibqos is stopping
    UNVERIFIED = "unverified"
    #: OpenSM did not take the files (a fatal error in its log, the verifier, no sweep
    #: within ``sweep_timeout_s``): the previous files are put back and OpenSM signalled
    REJECTED = "rejected"
    #: OpenSM was gone after the signal: the previous files are put back on disk,
    #: unsignalled (OpenSM reads them when it starts again)
    OPENSM_EXITED = "opensm exited"
    #: a stop cut the wait before OpenSM's sweep was seen: the previous files are put
    #: back and OpenSM signalled again (it may have read the new ones)
    CUT_SHORT = "cut short"


#: the outcomes that are no failure: the files are in place (or already were)
_TAKEN = frozenset(
    {ApplyOutcome.UNCHANGED, ApplyOutcome.WRITTEN, ApplyOutcome.VERIFIED, ApplyOutcome.UNVERIFIED}
)


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did: its outcome, and the files and problems beside it.

    Attributes:
        outcome: how the apply ended.
        changed: files whose content differed and were written (empty: unchanged).
        problems: what failed (log lines, verification problems), one line each.
        rolled_back: after a failure, the previous files were put back on disk (False:
            putting them back failed too, or nothing failed).
        sweep_s: seconds from the signal to the end of OpenSM's heavy sweep (None if not
            signalled or not seen).
        verify_s: seconds the verification took.
        started_s: UNIX time the apply started, seconds.
        warnings: OpenSM's non-fatal errors about its files (``ERR AC14``...), one line each.
        held: why ibqos now holds (OpenSM rejects the previous files too); None: no hold.
        log_missing: OpenSM's log could not be read: no sweep line was waited for, only
            :data:`SETTLE_S`.
    """

    outcome: ApplyOutcome = ApplyOutcome.UNCHANGED
    changed: tuple[Path, ...] = ()
    problems: tuple[str, ...] = ()
    rolled_back: bool = False
    sweep_s: float | None = None
    verify_s: float = 0.0
    started_s: float = field(default_factory=time.time)
    warnings: tuple[str, ...] = ()
    held: str | None = None
    log_missing: bool = False

    @property
    def ok(self) -> bool:
        """OpenSM took the files (no fatal error in its log, verification passed), or
        nothing changed."""
        return self.outcome in _TAKEN

    @property
    def signalled(self) -> bool:
        """OpenSM was signalled (only when a file changed and a signaller is configured)."""
        return self.outcome not in (ApplyOutcome.UNCHANGED, ApplyOutcome.WRITTEN)

    def summary(self) -> str:
        """One line for the log and ``ibqos status``: what happened."""
        outcome = self.outcome
        if outcome is ApplyOutcome.UNCHANGED:
            return "no change"
        names = ", ".join(p.name for p in self.changed)
        first = self.problems[0] if self.problems else "unknown"
        back = "put back" if self.rolled_back else "NOT put back"
        if outcome is ApplyOutcome.OPENSM_EXITED:
            return (
                f"OpenSM exited after the signal: {names} {back} on disk, not signalled ({first})"
            )
        if outcome is ApplyOutcome.CUT_SHORT:
            return f"stopped before OpenSM's sweep was seen: {names} {back}, OpenSM signalled again"
        if outcome is ApplyOutcome.REJECTED:
            what = "rolled back" if self.rolled_back else "FAILED, not rolled back"
            held = "; OpenSM rejects the previous files too: held" if self.held else ""
            return f"{what} {names}: {first}{held}"
        notes = []
        if self.sweep_s is not None:
            notes.append(f"sweep {self.sweep_s:.1f} s")
        if self.log_missing:
            notes.append(f"no OpenSM log: waited {SETTLE_S:g} s")
        if outcome is ApplyOutcome.UNVERIFIED:
            notes.append("not verified")
        if self.warnings:
            notes.append(f"OpenSM warns: {self.warnings[0]}")
        return f"applied {names}" + "".join(f", {n}" for n in notes)

    def to_doc(self) -> dict[str, Any]:
        """The result as the state file keeps it (``last_apply``)."""
        return {
            "summary": self.summary(),
            "time_s": self.started_s,
            "changed": [str(p) for p in self.changed],
            "signalled": self.signalled,
            "ok": self.ok,
            "rolled_back": self.rolled_back,
            "problems": list(self.problems),
            "sweep_s": self.sweep_s,
            "verify_s": self.verify_s,
            "warnings": list(self.warnings),
            "held": self.held,
            "log_missing": self.log_missing,
            "opensm_exited": self.outcome is ApplyOutcome.OPENSM_EXITED,
            "cut_short": self.outcome is ApplyOutcome.CUT_SHORT,
        }
