"""What the checker finds: one :class:`Finding` per line of ``ibqos check-opensm``, and the
marker check both files share."""

from __future__ import annotations

from dataclasses import dataclass

from ibqos.opensm.conf import marker_problem, split_lines
from ibqos.opensm.policy.model import Severity

__all__ = [
    "Finding",
    "Findings",
    "check_markers",
]


@dataclass(frozen=True)
class Finding:
    """One thing the checker found.

    Attributes:
        source: the file (as the caller named it).
        line: line number from 1; None for the file as a whole.
        message: what OpenSM would do, and what to write instead.
        severity: "error" (OpenSM drops or misreads it) or "warning" (accepted, suspicious).
    """

    source: str
    line: int | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class Findings:
    """Findings of one file, as they are found."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Finding] = []

    def add(self, line: int | None, message: str, severity: Severity = "error") -> None:
        """One finding at *line* (None: the whole file)."""
        # one line each, whatever a file's text put into the message
        text = message.replace("\r", "\\r").replace("\n", "\\n")
        self.items.append(Finding(self.source, line, text, severity))

    def sorted(self) -> list[Finding]:
        """In line order (whole-file findings first), errors before warnings."""
        return sorted(self.items, key=lambda f: (f.line or 0, f.severity != "error"))


def check_markers(text: str, begin: str, end: str, out: Findings) -> None:
    """ibqos's block markers: OpenSM ignores them (comments), but ibqos refuses to rewrite
    a file whose markers do not delimit one block."""
    _, problem = marker_problem(split_lines(text), begin, end)
    if problem is not None:
        out.add(
            problem[0],
            f"{problem[1]} (OpenSM reads the file; ibqos will not rewrite it)",
            "warning",
        )
