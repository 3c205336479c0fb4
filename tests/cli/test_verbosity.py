"""How much ibqos says: one-shot commands log warnings only and say what they wait for;
the daemon logs INFO; ``-v`` and ``--debug`` go before or after the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.collect.replay import CSV_COLUMNS, FORMAT, INDEX, VERSION, SweepRecorder
from ibqos.collect.sweep import Sweep, empty_table
from ibqos.fabric.model import fabric_from_text

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "tests/data/lab-xgft-2_8.4_1.2/ibnetdiscover.txt"


@pytest.fixture
def replay(tmp_path: Path) -> list[str]:
    """``ibqos plan`` arguments for two recorded sweeps, 1 s apart, of the lab fabric."""
    fabric = fabric_from_text(TOPOLOGY.read_text(), str(TOPOLOGY))
    targets = fabric.targets()
    rec = SweepRecorder(tmp_path / "rec")
    for k in range(2):
        table = empty_table(targets)
        for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait"):
            table[col] = pd.array([k * 1_000_000] * len(targets), dtype="UInt64")
        table["time_s"] = 1000.0 + k
        table["counter_bits"] = pd.Series([64] * len(targets), dtype="uint8")
        table["error"] = ""
        rec.record(Sweep(targets, table, "native", 1000.0 + k, 0.01))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {id: '1', nodes: 'cn[0001-0004]'}\n")
    return ["--replay", str(tmp_path / "rec"), "--topology", str(TOPOLOGY), "--jobs", str(jobs)]


def levels(stderr: str) -> set[str]:
    """The log levels of the log lines in *stderr*."""
    words = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    return {line.split(" ", 1)[0] for line in stderr.splitlines()} & words


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["plan"], set()),
        (["plan", "-v"], {"INFO"}),
        (["-v", "plan"], {"INFO"}),
        (["plan", "--verbose"], {"INFO"}),
        (["plan", "--debug"], {"INFO", "DEBUG"}),
        (["--debug", "plan"], {"INFO", "DEBUG"}),
    ],
)
def test_a_one_shot_command_logs_warnings_only_unless_asked(
    replay: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], want
) -> None:
    monkeypatch.setenv("IBQOS_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}\n")
    result = CliRunner().invoke(cli, [*args, *replay])
    assert result.exit_code == 0, result.output
    assert levels(result.stderr) == want, result.stderr
    assert result.stdout.startswith("JOB ")  # the answer, alone on stdout
    assert result.stdout.splitlines()[-1].startswith("nothing written: planned from scratch")


def test_debug_after_the_command_gives_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--debug`` after the command means what it means before it: an unexpected error
    is raised with its traceback instead of summed up in one line."""

    def broken(state_dir: Path) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("ibqos.cli.status.load_state", broken)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"agent:\n  state_dir: {tmp_path}\n")
    plain = CliRunner().invoke(cli, ["status", "--config", str(cfg)])
    assert plain.exit_code == 1 and isinstance(plain.exception, SystemExit)
    assert plain.stderr == (
        "ibqos: unexpected error: RuntimeError: boom (run with --debug for a traceback)\n"
    )
    for args in (["--debug", "status"], ["status", "--debug"]):
        result = CliRunner().invoke(cli, [*args, "--config", str(cfg)])
        assert isinstance(result.exception, RuntimeError), (args, result.output)


def test_lab_run_passes_the_options_after_its_name_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """What follows ``lab run NAME`` belongs to the command it runs, ``--debug`` too."""
    group = cli.get_command(click.Context(cli), "lab")  # loaded when asked for
    assert isinstance(group, click.Group)
    assert "--debug" in [o for p in group.params for o in getattr(p, "opts", [])]
    run = group.commands["run"]
    assert "--debug" not in [o for p in run.params for o in getattr(p, "opts", [])]


# -- ibqos run, as a process: the daemon logs INFO, --once says what it waits for --------


@pytest.fixture
def agent_config(tmp_path: Path) -> Path:
    """An observe-mode agent on a file topology, an empty recording (every cycle fails
    softly: nothing to sweep), 0.2 s between sweeps, no socket, no exporter."""
    rec = tmp_path / "rec"
    rec.mkdir()
    index = {"format": FORMAT, "version": VERSION, "columns": list(CSV_COLUMNS), "sweeps": []}
    (rec / INDEX).write_text(json.dumps(index))
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    doc = {
        "fabric": {"source": "file", "path": str(TOPOLOGY)},
        "collect": {"backend": "replay", "replay_path": str(rec), "interval_s": 0.2},
        "jobs": {"path": str(tmp_path / "jobs.yaml")},
        "opensm": {
            "conf": str(tmp_path / "opensm.conf"),
            "policy_file": str(tmp_path / "qos-policy.conf"),
            "log": str(tmp_path / "opensm.log"),
            "reload_command": ["true"],
        },
        "agent": {"state_dir": str(tmp_path / "state"), "socket": ""},
        "metrics": {"listen": ""},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def ibqos(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "ibqos", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_run_once_says_what_it_waits_for_and_logs_warnings_only(agent_config: Path) -> None:
    proc = ibqos("run", "--once", "--dry-run", "--config", str(agent_config))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "sweeping counters (2 sweeps, 0.2 s apart)...\n" in err
    assert "INFO" not in levels(err) and "ERROR" in levels(err), err  # the empty recording
    proc = ibqos("run", "--once", "--dry-run", "-v", "--config", str(agent_config))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "INFO" in levels(err), err


def test_the_daemon_logs_info(agent_config: Path) -> None:
    proc = ibqos("run", "--config", str(agent_config))
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        # its signal handlers are in place once it cycles (every cycle fails here)
        while time.monotonic() < deadline and not any("cycle failed" in ln for ln in seen):
            seen.append(proc.stderr.readline())
            if not seen[-1]:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(seen) + rest
    said = levels("".join(seen))
    assert "INFO" in said and "DEBUG" not in said, seen
    assert "INFO ibqos.agent.daemon: stopping after" in rest
    assert "sweeping counters" not in "".join(seen) + rest  # its INFO lines say what it does
