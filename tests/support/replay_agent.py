"""An agent in enforce mode on a recorded fabric, without OpenSM: its config and one cycle."""

from __future__ import annotations

from pathlib import Path

import yaml

from ibqos.agent.daemon import Agent
from ibqos.fabric.model import fabric_from_file
from tests.support.paths import TESTS
from tests.support.recordings import recorded

TOPOLOGY = TESTS / "data/lab-xgft-2_8.4_1.2/ibnetdiscover.txt"
JOBS = {"jobs": [{"id": "A", "nodes": "cn[0001-0002]"}, {"id": "B", "nodes": "cn[0003-0004]"}]}


def replay_config(tmp_path: Path) -> tuple[Path, dict]:
    """An enforce-mode config on a file topology, a recording, and a reload command
    that fails (OpenSM would not take the files)."""
    rec = tmp_path / "rec"
    recorded(rec, fabric_from_file(TOPOLOGY), 4)
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(JOBS))
    (tmp_path / "etc").mkdir()
    doc = {
        "mode": "enforce",
        "fabric": {"source": "file", "path": str(TOPOLOGY)},
        "collect": {"backend": "replay", "replay_path": str(rec)},
        "jobs": {"path": str(tmp_path / "jobs.yaml")},
        "opensm": {
            "conf": str(tmp_path / "etc/opensm.conf"),
            "policy_file": str(tmp_path / "etc/qos-policy.conf"),
            "log": str(tmp_path / "opensm.log"),
            "reload_command": ["false"],
            "verify": False,
        },
        "agent": {"state_dir": str(tmp_path / "state"), "socket": ""},
        "metrics": {"listen": ""},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, doc


def plan_now(agent: Agent) -> bool:
    """One cycle: a sweep (of the recording), a plan, an apply."""
    return agent.cycles.soft(lambda: agent.cycle(sweep=True), report=False)
