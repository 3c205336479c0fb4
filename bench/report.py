"""What the benchmarks print: progress lines on stderr (the tables go to stdout)."""

from __future__ import annotations

import sys


def say(msg: str) -> None:
    """A progress line on stderr (the tables go to stdout)."""
    print(msg, file=sys.stderr, flush=True)
