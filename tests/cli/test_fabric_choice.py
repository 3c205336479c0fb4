"""The commands that take a fabric as ``--xgft`` or ``--topology``: neither or both is
one message each command words, with the exit status it has always had."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ibqos.cli import cli

ROOT = Path(__file__).resolve().parents[2]
JOBS = str(ROOT / "examples/demo-jobs.yaml")
TRACE = str(ROOT / "characterize/traces/stencil-trace.csv")
BOTH = ("--xgft", "2;4,2;1,2", "--topology", "fabric.net")


@pytest.mark.parametrize("given", [(), BOTH])
@pytest.mark.parametrize(
    ("command", "code", "stderr"),
    [
        (
            ("lab", "up", "--name", "x"),
            2,
            "Usage: ibqos lab up [OPTIONS]\nTry 'ibqos lab up --help' for help.\n\n"
            "Error: give exactly one of --xgft and --topology\n",
        ),
        (
            ("simulate", "--jobs", JOBS),
            1,
            "ibqos: simulate: give --xgft SPEC, or --topology FILE with --lfts FILE\n",
        ),
        (
            ("characterize", "trace", TRACE),
            1,
            "ibqos: topology: give the fabric as --xgft SPEC or --topology FILE (one of them)\n",
        ),
        (
            ("characterize", "jobs", "--jobs", JOBS),
            1,
            "ibqos: topology: give the fabric as --xgft SPEC or --topology FILE (one of them)\n",
        ),
    ],
)
def test_neither_or_both(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: tuple[str, ...],
    code: int,
    stderr: str,
    given: tuple[str, ...],
) -> None:
    monkeypatch.setenv("IBQOS_LAB_ROOT", str(tmp_path / "labs"))
    monkeypatch.delenv("IBQOS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [*command, *given], prog_name="ibqos")
    assert (result.exit_code, result.stderr) == (code, stderr)
    assert result.stdout == ""
    assert not (tmp_path / "labs").exists()
