"""ibqos restore: ibqos's lines leave OpenSM's files through the apply path, the admin's
lines (edits since ibqos's first write included) stay."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from ibqos.agent.lock import AgentLock
from ibqos.agent.state import AgentState, load_state, save_state
from ibqos.config.load import parse_config
from ibqos.config.models import Config
from ibqos.deploy.restore import SACheck, _default_sl, originals, restore, stripped
from ibqos.errors import ApplyError
from ibqos.opensm.apply import Applier, make_signaller
from ibqos.opensm.conf import render_conf
from ibqos.opensm.hold import HOLD_FILE, WRITTEN_FILE
from ibqos.opensm.policy import PolicyJob, parse_policy, render_policy

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
            "verify": False,  # no fabric to ask the SA about (the lab test does)
        },
        "agent": {"state_dir": str(tmp_path / "state")},
    }
    return parse_config(doc, "c.yaml")


def enforce(cfg: Config, conf: str, policy: str) -> None:
    """What the agent does: apply ibqos's versions of both files."""
    applier = Applier(cfg.agent.state_dir, make_signaller(cfg.opensm), cfg.opensm.log)
    assert applier.apply({cfg.opensm.conf: conf, cfg.opensm.policy_file: policy}).ok
    save_state(cfg.agent.state_dir, AgentState(plan={"jobs": []}, updated_s=1.0))


def ibqos_files(cfg: Config, sl: int) -> tuple[str, str]:
    """The files as ibqos renders them from what is on disk now: job 1 on *sl*."""
    conf = cfg.opensm.conf.read_text() if cfg.opensm.conf.exists() else ""
    values = {"qos": "TRUE", "qos_ca_sl2vl": ",".join(["0"] * 15 + [str(sl % 8)])}
    policy = cfg.opensm.policy_file
    job = PolicyJob("1", sl, (0x2C903000000A1, 0x2C903000000A2))
    return render_conf(conf, values), render_policy(
        policy.read_text() if policy.exists() else None, [job]
    )


def run_ibqos(cfg: Config, sl: int) -> None:
    enforce(cfg, *ibqos_files(cfg, sl))


def test_restore_puts_back_what_ibqos_first_found(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert originals(cfg) == {}  # nothing written yet: nothing to restore
    assert not restore(cfg).result.changed
    cfg.opensm.conf.write_text(ADMIN_CONF + "qos FALSE\n")  # no policy file at first
    run_ibqos(cfg, 1)
    run_ibqos(cfg, 2)
    conf_2 = cfg.opensm.conf.read_text()
    assert originals(cfg) == {
        cfg.opensm.conf: ADMIN_CONF + "qos FALSE\n",
        cfg.opensm.policy_file: None,
    }
    sweeps = cfg.opensm.log.read_text().count("SUBNET UP")
    done = restore(cfg)
    assert done.result.ok and done.result.signalled and not done.notes
    assert cfg.opensm.conf.read_text() == ADMIN_CONF + "qos FALSE\n"  # byte for byte
    assert not cfg.opensm.policy_file.exists()  # there was none: removed
    assert cfg.opensm.log.read_text().count("SUBNET UP") == sweeps + 1  # OpenSM re-read
    backup = cfg.agent.state_dir / "backup"
    assert (backup / "opensm.conf.prev").read_text() == conf_2
    assert (backup / "opensm.conf.orig").read_text() == ADMIN_CONF + "qos FALSE\n"  # kept
    state = load_state(cfg.agent.state_dir)
    assert state.plan is None and state.last_apply is not None
    assert state.last_apply["summary"].startswith("restored the files without ibqos's lines")
    assert not restore(cfg).result.changed  # again: nothing left to do


def test_restore_keeps_the_admins_edits_since_ibqos_first_wrote(tmp_path: Path) -> None:
    """The ``.orig`` copy is not put back whole: lines the admin added or changed outside
    ibqos's blocks after its first write stay; only ibqos's blocks and keys go."""
    cfg = config(tmp_path)
    admin_policy = "qos-levels\n  qos-level\n    name: DEFAULT\n    sl: 0\n  end-qos-level\n"
    admin_policy += "end-qos-levels\n"
    cfg.opensm.conf.write_text(ADMIN_CONF + "qos_ca_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7\n")
    cfg.opensm.policy_file.write_text(admin_policy)
    run_ibqos(cfg, 1)
    # the admin's edits while ibqos runs: outside the blocks, where ibqos keeps them
    conf = cfg.opensm.conf.read_text().replace("log_max_size 0", "log_max_size 100")
    cfg.opensm.conf.write_text("# edited later\n" + conf)
    cfg.opensm.policy_file.write_text("# storage first\n" + cfg.opensm.policy_file.read_text())
    run_ibqos(cfg, 3)
    # the state directory's bookkeeping: restore ends every hold and starts the record afresh
    (cfg.agent.state_dir / HOLD_FILE).write_text("{}")
    (cfg.agent.state_dir / WRITTEN_FILE).write_text("{}")
    assert restore(cfg).result.ok
    assert cfg.opensm.conf.read_text() == (
        "# edited later\n# the admin's opensm.conf\nlog_max_size 100\n"
        "qos_ca_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7\n"  # the admin's own, from .orig
    )
    assert cfg.opensm.policy_file.read_text() == "# storage first\n" + admin_policy
    assert not (cfg.agent.state_dir / HOLD_FILE).exists()
    assert not (cfg.agent.state_dir / WRITTEN_FILE).exists()


def test_restore_leaves_a_file_without_ibqos_block_as_it_is(tmp_path: Path) -> None:
    """Another writer took ibqos's lines out already: nothing of ibqos's is left there."""
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    run_ibqos(cfg, 1)
    cfg.opensm.conf.write_text("# the template\nqos TRUE\n")
    files = stripped(cfg)
    assert files[cfg.opensm.conf] == "# the template\nqos TRUE\n"
    assert files[cfg.opensm.policy_file] is None  # ibqos created it: removed


def test_restore_refuses_damaged_markers(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    run_ibqos(cfg, 1)
    conf = cfg.opensm.conf.read_text()
    cfg.opensm.conf.write_text(conf.replace("# END ibqos managed keys\n", ""))
    with pytest.raises(ApplyError, match=r"no end marker.*nothing restored"):
        restore(cfg)
    assert cfg.opensm.conf.read_text() == conf.replace("# END ibqos managed keys\n", "")


def test_a_restore_opensm_rejects_is_rolled_back(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    cfg.opensm.policy_file.write_text("qos-ulps\ndefault : 0\nend-qos-ulps\n")
    conf, policy = ibqos_files(cfg, 1)
    enforce(cfg, conf, policy)
    broken = config(tmp_path, reload='"ERR AC05: Syntax error (line 1:1)"')
    done = restore(broken)
    assert not done.result.ok and done.result.rolled_back
    assert "ERR AC05" in done.result.summary()
    assert cfg.opensm.conf.read_text() == conf  # ibqos's files again
    assert cfg.opensm.policy_file.read_text() == policy


def test_restore_refuses_while_any_agent_runs(tmp_path: Path) -> None:
    """An observing agent too: it rewrites state.json each cycle, over restore's record."""
    cfg = config(tmp_path)
    cfg.opensm.conf.write_text(ADMIN_CONF)
    run_ibqos(cfg, 1)
    conf = cfg.opensm.conf.read_text()
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
            assert cfg.opensm.conf.read_text() == conf  # untouched
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
    run_ibqos(cfg, 1)
    during = config(tmp_path, reload=f'"$({start}; echo started)"')
    assert restore(during).result.ok
    assert "another ibqos agent runs on state directory" in seen.read_text()
    assert AgentLock(cfg.agent.state_dir, "enforce")  # and let go of it afterwards


def test_the_sa_check_wants_the_admins_default_where_no_rule_of_the_admin_decides() -> None:
    answers = {"2": "\t\tsl.......................0x1\n", "4": "\t\tsl.......................3\n"}

    def saquery(argv: Sequence[str]) -> str:
        return answers[argv[-1]]

    check = SACheck([("A", 1, 2), ("B", 3, 4)], 1, saquery)  # type: ignore[arg-type]
    problems = check()
    assert problems == ["job B: PathRecord lid 3->4 has SL 3, the policy gives SL 1"]
    assert check.lines == []
    answers["4"] = answers["2"]
    assert check() == [] and check.lines == [
        "the SA serves SL 1 (the admin's DEFAULT) on 2 path(s) of ibqos's jobs"
    ]
    # the admin's own match rules decide: each path's SL is reported, none is wrong
    answers["4"] = "\t\tsl.......................3\n"
    served = SACheck([("A", 1, 2), ("B", 3, 4)], None, saquery)  # type: ignore[arg-type]
    assert served() == []
    assert served.lines[1] == "job B: the SA serves SL 3 lid 3->4 (the admin's rules)"


@pytest.mark.parametrize(
    ("policy", "sl"),
    [
        ("", 0),  # no policy: SL 0
        ("qos-levels\nqos-level\nname: DEFAULT\nsl: 2\nend-qos-level\nend-qos-levels\n", 2),
        ("qos-ulps\ndefault : 4\nend-qos-ulps\n", 4),
        ("qos-ulps\ndefault : 0\nipoib : 3\nend-qos-ulps\n", None),  # the admin's ULPs
    ],
)
def test_the_sl_a_path_gets_from_the_admins_policy_alone(policy: str, sl: int | None) -> None:
    assert _default_sl(parse_policy(policy)) == sl
