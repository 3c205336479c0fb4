"""One daemon per state directory; restore asks who runs there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.agent.lock import AgentLock, holder
from ibqos.errors import AgentLockError

HOLD = (
    "import sys; from pathlib import Path; from ibqos.agent.lock import AgentLock;"
    " lock = AgentLock(Path(sys.argv[1]), 'enforce'); print('held', flush=True);"
    " sys.stdin.read()"
)


def test_a_second_agent_is_refused_and_the_holder_is_known(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert holder(state) is None  # no lock file yet
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        assert holder(state) == (other.pid, "enforce")
        with pytest.raises(AgentLockError) as info:
            AgentLock(state, "observe")
        assert str(info.value) == (
            f"another ibqos agent runs on state directory {state} (pid {other.pid})"
        )
    finally:
        assert other.stdin is not None
        other.stdin.close()  # the holder exits; the kernel drops its lock
        other.wait(timeout=10)
        assert other.stdout is not None
        other.stdout.close()
    assert holder(state) is None  # no stale lock after the process is gone
    lock = AgentLock(state, "observe")
    try:
        lock.set_mode("enforce")
        assert (state / "agent.lock").read_text().split()[1] == "enforce"
    finally:
        lock.close()
    assert holder(state) is None
