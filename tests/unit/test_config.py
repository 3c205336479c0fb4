"""Config sections of collection: every bad value is named by its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.config.schema import CollectConfig, FabricConfig, parse_config
from ibqos.errors import ConfigError


def test_defaults() -> None:
    cfg = parse_config({}, "c.yaml")
    assert cfg.collect == CollectConfig()
    assert cfg.fabric == FabricConfig(source="ibnetdiscover")
    assert (cfg.collect.backend, cfg.collect.window, cfg.collect.timeout_s) == ("native", 32, 0.5)


def test_a_lab_config_reads_the_lab_fabric_by_default() -> None:
    cfg = parse_config({"lab": {"name": "l1", "dir": "/tmp/labs/l1"}}, "c.yaml")
    assert cfg.fabric.source == "lab"


def test_values_are_read() -> None:
    cfg = parse_config(
        {
            "fabric": {"source": "file", "path": "/f.txt", "root_guids": [1, 2], "refresh_s": 0},
            "collect": {
                "backend": "replay",
                "replay_path": "/rec",
                "replay_loop": True,
                "interval_s": 2.5,
                "window": 8,
                "retries": 0,
                "xmit_wait": False,
                "ca": "mlx5_1",
                "port": 2,
            },
        },
        "c.yaml",
    )
    assert cfg.fabric == FabricConfig("file", Path("/f.txt"), (1, 2), 0.0)
    c = cfg.collect
    assert (c.backend, c.replay_path, c.replay_loop) == ("replay", Path("/rec"), True)
    assert (c.interval_s, c.window, c.retries, c.xmit_wait) == (2.5, 8, 0, False)
    assert (c.ca, c.port) == ("mlx5_1", 2)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"collect": {"backend": "snmp"}}, "collect.backend: expected one of native, perfquery"),
        ({"collect": {"window": 0}}, "collect.window: expected an integer >= 1, got 0"),
        ({"collect": {"window": 2.5}}, "collect.window: expected an integer >= 1, got 2.5"),
        ({"collect": {"timeout_s": "fast"}}, "collect.timeout_s: expected a number"),
        ({"collect": {"retries": -1}}, "collect.retries: expected an integer >= 0"),
        ({"collect": {"xmit_wait": "yes"}}, "collect.xmit_wait: expected true or false"),
        ({"collect": {"interval_s": True}}, "collect.interval_s: expected a number"),
        ({"collect": {"windw": 4}}, "collect.windw: unknown key"),
        ({"collect": {"backend": "replay"}}, "collect.replay_path: required"),
        ({"fabric": {"source": "file"}}, "fabric.path: required when fabric.source is file"),
        ({"fabric": {"source": "lab"}}, "fabric.source: 'lab' needs a lab section"),
        ({"fabric": {"source": "sa"}}, "fabric.source: expected one of ibnetdiscover, file, lab"),
        ({"fabric": {"root_guids": "0x1"}}, "fabric.root_guids: expected a list of GUIDs"),
        ({"fabric": {"refresh_s": -1}}, "fabric.refresh_s: expected a number >= 0"),
        ({"collect": []}, "collect: expected a mapping"),
        ({"collect": {"interval_s": float("nan")}}, "collect.interval_s: expected a number"),
        ({"collect": {"timeout_s": float("inf")}}, "collect.timeout_s: expected a number"),
        ({"collect": {"port": 999}}, "collect.port: expected an integer >= 0 and <= 254"),
    ],
)
def test_bad_values_name_their_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "c.yaml")
    assert str(err.value).startswith("c.yaml: ")
    assert message in str(err.value)


def test_the_slurm_source_and_the_sl_hand_off() -> None:
    from ibqos.config.schema import AgentConfig, SlurmConfig

    cfg = parse_config(
        {
            "jobs": {"source": "slurm"},
            "slurm": {
                "squeue": ["squeue", "-M", "c2"],
                "conf": "/etc/slurm/c2.conf",
                "format": "text",
                "poll_s": 5,
                "grace_s": 0,
                "timeout_s": 2,
                "notify_dir": "",
            },
            "agent": {"socket": "/run/x.sock", "sl_listen": "10.0.0.1:9684"},
        },
        "c.yaml",
    )
    assert cfg.jobs.source == "slurm"
    assert cfg.slurm == SlurmConfig(
        ("squeue", "-M", "c2"), Path("/etc/slurm/c2.conf"), "text", 5.0, 0.0, 2.0, None
    )
    assert (cfg.agent.socket, cfg.agent.sl_listen) == (Path("/run/x.sock"), ("10.0.0.1", 9684))
    default = parse_config({}, "c.yaml")
    assert default.slurm == SlurmConfig() and default.agent == AgentConfig()
    assert parse_config({"agent": {"socket": None}}, "c.yaml").agent.socket is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"jobs": {"source": "pbs"}}, "jobs.source: expected one of ('file', 'slurm'), got 'pbs'"),
        ({"slurm": {"format": "yaml"}}, "slurm.format: expected one of auto, json, text"),
        ({"slurm": {"squeue": []}}, "slurm.squeue: expected a command (string or list"),
        ({"slurm": {"squeue": [1]}}, "slurm.squeue: expected a command (string or list"),
        ({"slurm": {"poll_s": 0}}, "slurm.poll_s: expected a number >= 0.1, got 0"),
        ({"slurm": {"grace_s": -1}}, "slurm.grace_s: expected a number >= 0, got -1"),
        ({"slurm": {"grace": 5}}, "slurm.grace: unknown key"),
        ({"agent": {"sl_listen": "9684"}}, "agent.sl_listen: expected host:port"),
        ({"agent": {"socket": 5}}, "agent.socket: expected a non-empty string, got 5"),
    ],
)
def test_bad_slurm_values_name_their_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "c.yaml")
    assert str(err.value).startswith("c.yaml: ")
    assert message in str(err.value)
