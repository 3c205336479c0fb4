"""What ``ibqos`` imports to start: a command's module when the command is asked for, and
the libraries of the work (pandas, numpy, numba, matplotlib, pydantic, the simulator) only
where it runs.  The time it takes is measured by ``python -m bench.cli.startup``; these
tests hold the structure that makes it short."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ibqos.cli import COMMANDS, cli

#: what no ``--help`` of the commands below, nor ``import ibqos.cli``, may import
HEAVY = ("pandas", "numpy", "numba", "matplotlib", "scapy", "pydantic", "ibqos.sim")

#: prints, as the process ends, which of HEAVY it imported (a command ends by SystemExit)
PROBE = """
import atexit, json, sys
heavy = {heavy!r}
atexit.register(lambda: print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr))
sys.argv = ["ibqos", *{args!r}]
{code}
"""


def _imported(args: list[str], code: str) -> list[str]:
    """HEAVY modules a fresh interpreter imported running *code* with argv ``ibqos *args``."""
    script = PROBE.format(heavy=HEAVY, args=args, code=code)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stderr, done
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


def test_importing_the_cli_imports_no_command() -> None:
    assert _imported([], "import ibqos.cli") == []


@pytest.mark.parametrize("command", ["job-sl", "status", "check-config"])
def test_a_commands_help_imports_none_of_the_work(command: str) -> None:
    assert _imported([command, "--help"], "from ibqos.cli import main; main()") == []


def test_the_list_of_commands_is_each_commands_own_short_help() -> None:
    """COMMANDS names every command's module, and its summary gives the short help the
    command gives, at every width ``ibqos --help`` can shorten it to."""
    for name, entry in COMMANDS.items():
        command = getattr(importlib.import_module(entry.module), entry.name)
        assert isinstance(command, click.Command) and command.name == name
        stand_in = click.Command(name, help=entry.summary)
        for limit in range(0, 200):
            assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (
                name,
                limit,
            )
    assert list(COMMANDS) == sorted(COMMANDS)


@pytest.mark.parametrize("width", [50, 80, 120])
def test_ibqos_help_lists_the_commands_as_when_they_are_loaded(width: int) -> None:
    """``ibqos --help`` in a fresh process (no command loaded) is the help of the group
    with every command loaded, byte for byte."""
    env = {**os.environ, "COLUMNS": str(width)}
    fresh = subprocess.run(
        [sys.executable, "-c", "from ibqos.cli import cli; cli(prog_name='ibqos')", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        assert cli.get_command(ctx, name) is not None
    # the width click gives a terminal of *width* columns (click.HelpFormatter)
    text_width = max(min(width, 80) - 2, 50)
    loaded = CliRunner().invoke(cli, ["--help"], prog_name="ibqos", terminal_width=text_width)
    assert loaded.exit_code == 0
    assert fresh.stdout == loaded.output
    assert "  job-sl        Print the SL " in loaded.output


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["jobsl"])
    assert result.exit_code == 2
    assert "No such command 'jobsl'" in result.stderr


def test_the_benchmark_runs() -> None:
    """``python -m bench.cli.startup`` (docs/slurm.md holds a run): one round, one table."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli.startup", "--rounds", "1"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [
        "python -c 'import click, yaml'",
        "ibqos job-sl --help",
        "ibqos status --help",
        "ibqos check-config --help",
    ]
