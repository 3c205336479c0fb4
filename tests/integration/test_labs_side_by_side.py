"""Two labs up at once, each with its agent started on the lab's own config: each agent
serves its own metrics port and SL socket, and ``check-config`` sees no clash."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

from ibqos.lab.files import agent_socket
from tests.support.agentrun import start_agent


def fabric_of(address: str) -> str | None:
    """The fabric named by the agent at *address* (None: nothing answers there yet)."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    m = re.search(r'^ibqos_fabric_info\{fabric="([^"]*)"', text, re.M)
    return None if m is None else m.group(1)


def check_config(lab) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ibqos", "check-config", str(lab.paths.config)],
        capture_output=True,
        text=True,
        check=False,
        env=lab.env(),
    )


def test_two_labs_run_an_agent_each(make_lab, tmp_path) -> None:
    labs = [make_lab("2;4,2;1,2", name=name) for name in ("east", "west")]
    addresses = [json.loads(lab.paths.spec.read_text())["agent_metrics"] for lab in labs]
    assert len(set(addresses)) == 2 and "127.0.0.1:9683" not in addresses
    sockets = [agent_socket(lab.paths) for lab in labs]
    assert sockets == [lab.paths.run.absolute() / "ibqos.sock" for lab in labs]
    # nothing runs yet: each config's files, OpenSM (a live pid), port and socket are fine
    for lab in labs:
        done = check_config(lab)
        assert done.returncode == 0 and done.stdout == f"{lab.paths.config}: ok\n", done.stdout

    procs = []
    try:
        for lab in labs:
            (tmp_path / lab.paths.name).mkdir()
            procs.append(start_agent(lab, lab.paths.config, tmp_path / lab.paths.name))
        deadline = time.monotonic() + 90
        while not all(
            fabric_of(a) == lab.paths.name for a, lab in zip(addresses, labs, strict=True)
        ) or not all(s is not None and s.is_socket() for s in sockets):
            for proc, lab in zip(procs, labs, strict=True):
                log = (tmp_path / lab.paths.name / "agent.log").read_text()
                assert proc.poll() is None, f"the agent of {lab.paths.name} exited: {log}"
            assert time.monotonic() < deadline, "the agents did not both come up"
            time.sleep(0.5)
        # with both agents up, each config names its own agent's port and socket
        done = check_config(labs[1])
        assert done.returncode == 0, done.stdout
        assert done.stdout.startswith("note: agent.state_dir: an ibqos agent (enforce, pid")
        assert all(proc.poll() is None for proc in procs)
    finally:
        for proc in procs:
            proc.stop()
