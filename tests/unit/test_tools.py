"""The one-shot tool runner: how a run ends, and the words that name the tool."""

from __future__ import annotations

import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibqos.tools import ToolRun, find_tool, run_tool

PY = sys.executable


def script(tmp_path: Path, name: str, body: str) -> Path:
    """An executable Python script *name* in tmp_path/bin."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(f"#!{PY}\n{body}")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_exit_zero_captures_text_output():
    run = run_tool(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], timeout_s=30
    )
    assert run.ok and run.returncode == 0 and run.cause is None
    assert (run.stdout, run.stderr) == ("out\n", "err\n")
    assert run.name == PY and run.argv[1:] == ("-c", run.argv[2])
    assert run.message() == ""
    assert not (run.not_found or run.timed_out or run.exec_error)


def test_env_cwd_and_stdin_reach_the_tool(tmp_path):
    code = "import os, sys; print(os.environ['WHO'], os.getcwd(), sys.stdin.read())"
    run = run_tool([PY, "-c", code], timeout_s=30, env={"WHO": "lab"}, cwd=tmp_path, stdin="fed")
    assert run.stdout == f"lab {tmp_path} fed\n"


def test_non_zero_exit_names_the_tool_and_its_last_stderr_line():
    code = "import sys; sys.stderr.write('ibwarn: one\\n  ibpanic: two  \\n\\n'); sys.exit(3)"
    run = run_tool([PY, "-c", code], timeout_s=30, name="perfquery -x 3 1")
    assert not run.ok and run.returncode == 3 and run.cause is None
    assert run.last_stderr() == "ibpanic: two"
    assert run.message() == "perfquery -x 3 1 failed (exit status 3): ibpanic: two"


def test_silent_failure_says_so():
    run = run_tool([PY, "-c", "raise SystemExit(1)"], timeout_s=30, name="tool")
    assert run.last_stderr() == "no output on stderr"
    assert run.last_stderr("no output") == "no output"
    assert run.message() == "tool failed (exit status 1): no output on stderr"


def test_missing_program(tmp_path):
    run = run_tool([str(tmp_path / "nothere"), "x"], timeout_s=30)
    assert run.not_found and run.returncode is None and run.exec_error is not None
    assert run.reason == "No such file or directory"
    assert run.message() == f"{tmp_path}/nothere: command not found"
    assert run.message("diags install it") == (
        f"{tmp_path}/nothere: command not found (diags install it)"
    )


def test_program_that_cannot_be_executed(tmp_path):
    (tmp_path / "tool").write_text("")
    run = run_tool([str(tmp_path / "tool")], timeout_s=30, name="tool")
    assert not run.not_found and run.exec_error is not None
    assert run.message() == "tool: cannot run: Permission denied"


def test_timeout_kills_the_tool_and_says_after_how_long():
    t0 = time.monotonic()
    run = run_tool([PY, "-c", "import time; time.sleep(30)"], timeout_s=0.5, name="slow")
    assert time.monotonic() - t0 < 10
    assert run.timed_out and run.returncode is None and run.exec_error is None
    assert isinstance(run.cause, subprocess.TimeoutExpired)
    assert run.reason == ""
    assert run.message() == "slow: no answer within 0.5 s"


def test_executable_runs_under_the_name_it_is_given():
    # sh's $0 is the argv[0] it was started with
    run = run_tool(["perfquery", "-c", 'echo "$0"'], timeout_s=30, executable="/bin/sh")
    assert run.stdout == "perfquery\n"
    assert run.name == "perfquery"


def test_undecodable_output_is_replaced_on_request():
    code = "import sys; sys.stdout.buffer.write(b'node \\xff\\n')"
    run = run_tool([PY, "-c", code], timeout_s=30, errors="replace")
    assert run.stdout == "node \ufffd\n"


def test_completed_is_what_subprocess_run_returns():
    run = run_tool([PY, "-c", "print('x')"], timeout_s=30)
    done = run.completed()
    assert isinstance(done, subprocess.CompletedProcess)
    assert (done.args, done.returncode, done.stdout, done.stderr) == (list(run.argv), 0, "x\n", "")
    with pytest.raises(ValueError, match="did not exit"):
        ToolRun("t", ("t",), 1.0, cause=OSError(2, "gone")).completed()


def test_find_tool_searches_the_path_of_the_given_environment(tmp_path, monkeypatch):
    exe = script(tmp_path, "smpquery", "")
    assert find_tool("smpquery", {"PATH": str(exe.parent)}) == str(exe)
    assert find_tool("smpquery", {"PATH": str(tmp_path)}) is None
    monkeypatch.setenv("PATH", str(exe.parent))
    assert find_tool("smpquery") == str(exe)  # no environment: this process's
    assert find_tool("smpquery", {}) is None  # no PATH in it: os.defpath
