"""The one-shot tool runner: how a run ends, and the words that name the tool."""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibqos.errors import StopRequested
from ibqos.tools import SLICE_S, ToolRun, find_tool, poll_waiter, run_tool, set_waiter, waiter

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


# -- the waiter --------------------------------------------------------------------------


def sleeper(tmp_path: Path, seconds: float) -> list[str]:
    """A tool that writes its pid to tmp_path/pid, then sleeps *seconds*."""
    pidfile = tmp_path / "pid"
    code = (
        "import os, sys, time; "
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep({seconds})"
    )
    return [PY, "-c", code]


def gone(pid: int) -> bool:
    """No process (not even a zombie) has *pid* any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_waiter_is_called_between_slices_while_a_tool_runs(tmp_path):
    calls: list[float] = []
    with waiter(lambda: calls.append(time.monotonic())):
        run = run_tool(sleeper(tmp_path, 1.6), timeout_s=30)
    assert run.ok
    # 1.6 s in slices of 0.5 s: three calls at least, none more than a slice apart
    assert len(calls) >= 3
    assert all(b - a < SLICE_S + 0.3 for a, b in itertools.pairwise(calls))


def test_quick_tool_never_calls_the_waiter():
    calls: list[int] = []
    with waiter(lambda: calls.append(1)):
        run = run_tool([PY, "-c", "print('x')"], timeout_s=30)
    assert run.stdout == "x\n" and calls == []


def test_waiter_that_raises_ends_the_tool_by_pid_and_reaps_it(tmp_path):
    def stop() -> None:
        if (tmp_path / "pid").exists():
            raise StopRequested

    t0 = time.monotonic()
    with waiter(stop), pytest.raises(StopRequested):
        run_tool(sleeper(tmp_path, 60), timeout_s=120)
    assert time.monotonic() - t0 < 5  # a slice or two, not the tool's 60 s
    pid = int((tmp_path / "pid").read_text())
    assert gone(pid)  # killed and reaped: not left as a zombie either


def test_stop_requested_passes_through_exception_handlers(tmp_path):
    def stop() -> None:
        raise StopRequested

    caught = []
    with waiter(stop), pytest.raises(StopRequested):
        try:
            run_tool(sleeper(tmp_path, 60), timeout_s=120)
        except Exception as err:  # what a cycle's soft-error handler catches
            caught.append(err)
    assert caught == []
    assert gone(int((tmp_path / "pid").read_text()))


def test_timeout_still_holds_with_a_waiter(tmp_path):
    calls: list[int] = []
    t0 = time.monotonic()
    with waiter(lambda: calls.append(1)):
        run = run_tool(sleeper(tmp_path, 60), timeout_s=1.2, name="hung")
    assert 1.0 < time.monotonic() - t0 < 5
    assert run.timed_out and run.message() == "hung: no answer within 1.2 s"
    assert calls  # the loop was pinged while it waited
    assert gone(int((tmp_path / "pid").read_text()))


def test_stdin_is_fed_once_across_slices():
    code = "import sys, time; time.sleep(1.2); print(sys.stdin.read())"
    with waiter(lambda: None):
        run = run_tool([PY, "-c", code], timeout_s=30, stdin="fed")
    assert run.stdout == "fed\n"


def test_set_waiter_returns_the_previous_one_and_the_context_restores_it():
    def first() -> None:
        pass

    def second() -> None:
        raise StopRequested

    assert set_waiter(first) is None
    try:
        with waiter(second):
            with pytest.raises(StopRequested):
                poll_waiter()
        assert set_waiter(None) is first
    finally:
        set_waiter(None)
    poll_waiter()  # no waiter: nothing happens
