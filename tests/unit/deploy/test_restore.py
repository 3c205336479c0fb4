"""ibqos restore: the files ibqos first found go back through the apply path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.agent.lock import AgentLock
from ibqos.agent.state import AgentState, load_state, save_state
from ibqos.config.load import parse_config
from ibqos.config.models import Config
from ibqos.deploy.restore import originals, restore
from ibqos.errors import ApplyError
from ibqos.opensm.apply import Applier, make_signaller

ADMIN_CONF = "# the admin's opensm.conf\nlog_max_size 0\n"
SUBNET_UP = "Nov 22 10:00:00 000001 [0] 0x02 -> SUBNET UP"


def config(tmp_path: Path, reload: str = "") -> Config:
    """OpenSM files in tmp_path; "signalling" OpenSM appends its log lines (*reload* first)."""
    log = tmp_path / "opensm.log"
    script = f'printf "%s\\n" {reload} "{SUBNET_UP}" >> {log}'
    doc = {
        "opensm": {
            "conf": str(tmp_path / "opensm.conf"),
            "policy_file": str(tmp_path / "qos-policy.conf"),
            "log": str(log),
            "reload_command": ["sh", "-c", script],
            "sweep_timeout_s": 2,
        },
        "agent": {"state_dir": str(tmp_path / "state")},
    }
    return parse_config(doc, "c.yaml")


def enforce(cfg: Config, conf: str, policy: str) -> None:
    """What the agent does: apply ibqos's versions of both files."""
    applier = Applier(cfg.agent.state_dir, make_signaller(cfg.opensm), cfg.opensm.log)
    assert applier.apply({cfg.opensm.conf: conf, cfg.opensm.policy_file: policy}).ok
    save_state(cfg.agent.state_dir, AgentState(plan={"jobs": []}, updated_s=1.0))


def test_restore_puts_back_what_ibqos_first_found(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert originals(cfg) == {}  # nothing written yet: nothing to restore
    assert not restore(cfg).result.changed
    cfg.opensm.conf.write_text(ADMIN_CONF)  # no policy file at first
    enforce(cfg, ADMIN_CONF + "# ibqos 1\n", "# ibqos policy 1\n")
    enforce(cfg, ADMIN_CONF + "# ibqos 2\n", "# ibqos policy 2\n")
    assert originals(cfg) == {cfg.opensm.conf: ADMIN_CONF, cfg.opensm.policy_file: None}
    sweeps = cfg.opensm.log.read_text().count("SUBNET UP")
    done = restore(cfg)
    assert done.result.ok and done.result.signalled and not done.notes
    assert cfg.opensm.conf.read_text() == ADMIN_CONF  # byte for byte
    assert not cfg.opensm.policy_file.exists()  # there was none: removed
    assert cfg.opensm.log.read_text().count("SUBNET UP") == sweeps + 1  # OpenSM re-read
    backup = cfg.agent.state_dir / "backup"
    assert (backup / "opensm.conf.prev").read_text() == ADMIN_CONF + "# ibqos 2\n"
    assert (backup / "opensm.conf.orig").read_text() == ADMIN_CONF  # never replaced
    state = load_state(cfg.agent.state_dir)
    assert state.plan is None and state.last_apply is not None
    assert state.last_apply["summary"].startswith("restored the original files")
    assert not restore(cfg).result.changed  # again: nothing left to do


def test_a_restore_opensm_rejects_is_rolled_back(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    cfg.opensm.policy_file.write_text("qos-ulps\ndefault : 0\nend-qos-ulps\n")
    enforce(cfg, ADMIN_CONF + "# ibqos\n", "# ibqos policy\n")
    broken = config(tmp_path, reload='"ERR AC05: Syntax error (line 1:1)"')
    done = restore(broken)
    assert not done.result.ok and done.result.rolled_back
    assert "ERR AC05" in done.result.summary()
    assert cfg.opensm.conf.read_text() == ADMIN_CONF + "# ibqos\n"  # ibqos's files again
    assert cfg.opensm.policy_file.read_text() == "# ibqos policy\n"


def test_restore_refuses_while_any_agent_runs(tmp_path: Path) -> None:
    """An observing agent too: it rewrites state.json each cycle, over restore's record."""
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    enforce(cfg, ADMIN_CONF + "# ibqos\n", "# ibqos policy\n")
    hold = (
        "import sys; from pathlib import Path; from ibqos.agent.lock import AgentLock;"
        f" lock = AgentLock(Path({str(cfg.agent.state_dir)!r}), sys.argv[1]);"
        " print(flush=True); sys.stdin.read()"
    )
    for mode in ("enforce", "observe"):
        agent = subprocess.Popen(
            [sys.executable, "-c", hold, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert agent.stdout is not None
            agent.stdout.readline()
            with pytest.raises(ApplyError) as info:
                restore(cfg)
            assert f"in {mode} mode runs on {cfg.agent.state_dir} (pid {agent.pid})" in str(
                info.value
            )
            assert "stop it first" in str(info.value)
            assert cfg.opensm.conf.read_text() == ADMIN_CONF + "# ibqos\n"  # untouched
        finally:
            assert agent.stdin is not None and agent.stdout is not None
            agent.stdin.close()
            agent.wait(timeout=10)
            agent.stdout.close()
    assert restore(cfg).result.ok  # with no agent left
    assert cfg.opensm.conf.read_text() == ADMIN_CONF


def test_restore_holds_the_agent_lock_while_it_works(tmp_path: Path) -> None:
    """An agent starting in the middle of a restore (here: while OpenSM is signalled)
    fails at once instead of racing it."""
    seen = tmp_path / "agent-start"
    start = (
        f"{sys.executable} -c 'from pathlib import Path; from ibqos.agent.lock import AgentLock;"
        f' AgentLock(Path("{tmp_path / "state"}"), "enforce")\' > {seen} 2>&1'
    )
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    enforce(cfg, ADMIN_CONF + "# ibqos\n", "# ibqos policy\n")
    during = config(tmp_path, reload=f'"$({start}; echo started)"')
    assert restore(during).result.ok
    assert "another ibqos agent runs on state directory" in seen.read_text()
    assert AgentLock(cfg.agent.state_dir, "enforce")  # and let go of it afterwards
