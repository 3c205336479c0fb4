"""Running ``ibqos run`` against a lab, as the lab and fault tests do: the tests' jobs and
config defaults, the agent's files under the test's directory (``ibqos.yaml``,
``agent.log``, ``state/``), and what the tests read back from the fabric (LIDs, the SL the
SA serves, VLArb tables).  Starting, watching and stopping the agent (by pid) is
:mod:`ibqos.lab.agentrun`'s, shared with the benchmarks and the demo."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ibqos.lab import agentrun
from ibqos.lab.agentrun import AgentRun
from ibqos.lab.fabric import fabric_from_lab
from ibqos.opensm.conf import managed_keys

QUIET = {"sweep_interval": "0"}  # no periodic OpenSM sweeps moving the counters
LIGHT_A = {"id": "A", "name": "ft", "nodes": "cn[0001-0002,0005-0006]", "pattern": "all-to-all"}
LIGHT_A |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}
JOB_B = {"id": "B", "name": "pairs", "nodes": "cn[0003,0007]", "pattern": "ring"}
JOB_B |= {"rate_bytes_per_s": 2.0e8, "duty": 1.0, "period_s": 0.1}
JOB_C = {"id": "C", "name": "late", "nodes": "cn[0004,0008]", "pattern": "ring"}
JOB_C |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}
ADMIN = "# the admin's own lines, which ibqos must keep\nlog_max_size 0\n"


def write_jobs(lab, *jobs: Mapping[str, Any]) -> None:
    """The lab's job file holds *jobs* (an empty one without)."""
    agentrun.write_jobs(lab.paths.jobs, jobs)


def agent_config(lab, tmp_path: Path, **extra: Mapping[str, Any]) -> Path:
    """``tmp_path/ibqos.yaml``: the lab's config with short time constants, the agent's
    state under ``tmp_path/state``, and *extra*'s sections merged in last."""
    defaults = {
        "collect": {"interval_s": 1.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 2.0, "min_interval_s": 0.0},
        # no SL socket: the default /run/ibqos/ibqos.sock would be shared by agents
        # that run at once (test_slurm_lab.py serves its own)
        "agent": {"state_dir": str(tmp_path / "state"), "job_poll_s": 0.2, "socket": ""},
        "metrics": {"listen": "127.0.0.1:0"},  # any free port: tests never collide on one
        # trials reload OpenSM on their own: tests of other things keep the law (those of
        # tuning turn it on: agent_config(..., tuning={"enabled": True, ...}))
        "tuning": {"enabled": False},
    }
    return agentrun.agent_config(lab.paths.config, tmp_path / "ibqos.yaml", defaults, extra)


def state(tmp_path: Path) -> dict[str, Any]:
    """The state file of an agent configured by :func:`agent_config` ({} before one)."""
    return agentrun.read_state(tmp_path / "state")


def lids(lab) -> dict[str, int]:
    """Host name -> LID of its CA port."""
    fabric = fabric_from_lab(lab)
    return {
        fp.node_desc.split()[0]: fp.lid
        for fp in fabric.ports.values()
        if not fp.is_switch and fp.lid is not None
    }


def path_sl(lab, slid: int, dlid: int) -> int | None:
    out = lab.run(["saquery", "PR", "--slid", str(slid), "--dlid", str(dlid)]).stdout
    m = re.search(r"^\s*sl\.+0x([0-9a-fA-F]+)", out, re.M)
    return None if m is None else int(m.group(1), 16)


def drive(lab, until: Callable[[], bool], timeout: float, agent: AgentRun | None = None) -> float:
    """Tick the lab in real time until *until* holds; return the seconds it took."""
    t0 = last = time.monotonic()
    while not until():
        now = time.monotonic()
        assert now - t0 < timeout, f"not reached within {timeout} s"
        assert agent is None or agent.poll() is None, "the agent died"
        lab.reload_jobs()
        lab.tick(now - last)
        last = now
        time.sleep(0.1)
    return time.monotonic() - t0


def start_agent(
    lab,
    config: Path,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> AgentRun:
    """``ibqos run`` on *lab*, its log in ``tmp_path/agent.log`` (*prefix*: a command it
    runs under, e.g. setpriv); end it with its ``stop()``."""
    return AgentRun.on(lab, config, tmp_path / "agent.log", *args, env=env, prefix=prefix).start()


def admin_lines(text: str) -> list[str]:
    """opensm.conf without ibqos's block and the keys it manages (``qos`` and the
    ``qos_ca_*``/``qos_swe_*`` keys, which move into the block)."""
    managed = set(managed_keys(("ca", "swe")))
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("# BEGIN ibqos"):
            inside = True
        elif line.startswith("# END ibqos"):
            inside = False
        elif not inside and line.split(maxsplit=1)[:1] != [] and line.split()[0] in managed:
            continue
        elif not inside:
            out.append(line)
    return out


def vlarb_low(lab, lid: int, port: int) -> dict[int, int]:
    """VL -> weight of a port's low VLArb table, read from the switch (smpquery)."""
    out = lab.run(["smpquery", "vlarb", str(lid), str(port)], check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith(("VL", "WEIGHT"))][:2]
    vls, weights = ([int(x, 16) for x in re.findall(r"0x[0-9a-f]+", row)] for row in rows)
    table: dict[int, int] = {}
    for vl, weight in zip(vls, weights, strict=True):
        table[vl] = table.get(vl, 0) + weight
    return table


def spine(lab) -> tuple[int, int]:
    fabric = fabric_from_lab(lab)
    fp = next(fp for fp in fabric.ports.values() if fp.is_switch and fp.level == fabric.height)
    assert fp.lid is not None
    return fp.lid, fp.num
