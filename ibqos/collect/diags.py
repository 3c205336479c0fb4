"""Running infiniband-diags' query tools (``perfquery``, ``smpquery``): find, run, last word.

Both tools are found once, on the PATH of the environment they will run in, and then run
by full path with ``argv[0]`` kept as their plain name, so their own messages read
``perfquery: iberror: ...`` wherever they are installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ibqos.errors import IbqosError
from ibqos.tools import ToolRun, find_tool, run_tool

__all__ = ["IBERROR", "find_diag", "last_message", "run_diag"]

#: the line a diag prints on stdout when it gives up: ``perfquery: iberror: failed: ...``
IBERROR = re.compile(r"^\S+: iberror: ")


def find_diag(binary: str, env: Mapping[str, str] | None, error: type[IbqosError]) -> str:
    """Full path of *binary* on the PATH of *env* (default: this process's).

    Raises:
        IbqosError: of class *error*, naming *binary*, when it is not there.
    """
    found = find_tool(binary, env)
    if found is None:
        raise error(f"{binary} not found on PATH (install infiniband-diags)")
    return found


def run_diag(
    argv: Sequence[str],
    binary: str,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None,
    cwd: Path | None,
) -> ToolRun:
    """Run *binary* as ``argv[0]`` (the name its messages keep), output decoded leniently:
    node descriptions in it need not be UTF-8."""
    return run_tool(
        argv, timeout_s=timeout_s, env=env, cwd=cwd, executable=binary, errors="replace"
    )


def last_message(stdout: str, stderr: str) -> str:
    """A diag's own word on a failure: the last stderr line, else its iberror line."""
    for line in reversed(stderr.splitlines()):
        if line.strip():
            return line.strip()
    for line in reversed(stdout.splitlines()):
        if IBERROR.match(line):
            return line.strip()
    return "no message"
