"""``ibqos restore`` on the command line: what it prints and when it exits 1."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.config.load import parse_config
from ibqos.opensm.apply import Applier, make_signaller
from ibqos.opensm.conf import render_conf
from ibqos.opensm.policy import PolicyJob, render_policy

ADMIN = "# the admin's opensm.conf\nqos FALSE\nlog_max_size 0\n"
SUBNET_UP = "Nov 22 10:00:00 000001 [0] 0x02 -> SUBNET UP"


def setup(tmp_path: Path) -> Path:
    """A config whose OpenSM "reloads" by logging a heavy sweep, and ibqos's files
    applied once over the admin's opensm.conf (no policy file before ibqos)."""
    log = tmp_path / "opensm.log"
    doc = {
        "opensm": {
            "conf": str(tmp_path / "opensm.conf"),
            "policy_file": str(tmp_path / "qos-policy.conf"),
            "log": str(log),
            "reload_command": ["sh", "-c", f'echo "{SUBNET_UP}" >> {log}'],
            "sweep_timeout_s": 2,
            "verify": False,
        },
        "agent": {"state_dir": str(tmp_path / "state")},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = parse_config(doc, str(path))
    cfg.opensm.conf.write_text(ADMIN)
    files: dict[Path, str | None] = {
        cfg.opensm.conf: render_conf(ADMIN, {"qos": "TRUE"}),
        cfg.opensm.policy_file: render_policy(None, [PolicyJob("1", 2, (0xA1, 0xA2))]),
    }
    assert Applier(cfg.agent.state_dir, make_signaller(cfg.opensm), log).apply(files).ok
    return path


def test_restore_prints_what_it_did_then_that_nothing_is_left(tmp_path: Path) -> None:
    path = setup(tmp_path)
    conf = tmp_path / "opensm.conf"
    conf.write_text(conf.read_text() + "# the admin's later edit\n")
    out = CliRunner().invoke(cli, ["restore", "--config", str(path)])
    assert out.exit_code == 0, out.output
    assert f"restored {conf}" in out.output
    assert f"removed {tmp_path / 'qos-policy.conf'} (none at first)" in out.output
    assert "OpenSM: applied opensm.conf, qos-policy.conf" in out.output
    assert conf.read_text() == ADMIN + "# the admin's later edit\n"
    again = CliRunner().invoke(cli, ["restore", "--config", str(path)])
    assert again.exit_code == 0
    assert again.output == "nothing to restore: OpenSM's files hold no ibqos lines\n"


def test_restore_refuses_damaged_markers_in_one_line(tmp_path: Path) -> None:
    path = setup(tmp_path)
    conf = tmp_path / "opensm.conf"
    damaged = conf.read_text().replace("# END ibqos managed keys\n", "")
    conf.write_text(damaged)
    out = CliRunner().invoke(cli, ["restore", "--config", str(path)])
    assert out.exit_code == 1
    assert "no end marker" in out.output and "nothing restored" in out.output
    assert conf.read_text() == damaged


def test_restore_before_ibqos_ever_wrote(tmp_path: Path) -> None:
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump({"agent": {"state_dir": str(tmp_path / "state")}}))
    (tmp_path / "state").mkdir()
    out = CliRunner().invoke(cli, ["restore", "--config", str(path)])
    assert out.exit_code == 0
    assert "nothing to restore: ibqos never wrote OpenSM's files" in out.output
