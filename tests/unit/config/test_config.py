"""Config sections of collection: every bad value is named by its key path, all at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ibqos.config import (
    AgentConfig,
    CollectConfig,
    FabricConfig,
    MetricsConfig,
    SlurmConfig,
    load_config,
    parse_config,
)
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


def test_collection_bounds() -> None:
    default = parse_config({}, "c.yaml")
    c = default.collect
    assert (c.rate_margin, c.min_coverage, c.sweep_timeout_s) == (0.1, 0.9, None)
    assert c.sweep_deadline_s == c.interval_s == 10.0  # a sweep ends before the next is due
    assert default.fabric.discover_timeout_s == 60.0
    cfg = parse_config(
        {
            "fabric": {"discover_timeout_s": 20},
            "collect": {"rate_margin": 0.25, "min_coverage": 1, "sweep_timeout_s": 4},
        },
        "c.yaml",
    )
    c = cfg.collect
    assert (c.rate_margin, c.min_coverage, c.sweep_timeout_s) == (0.25, 1.0, 4.0)
    assert c.sweep_deadline_s == 4.0 and cfg.fabric.discover_timeout_s == 20.0
    assert parse_config({"collect": {"sweep_timeout_s": None}}, "c.yaml").collect == CollectConfig()


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
        ({"collect": {"rate_margin": -0.1}}, "collect.rate_margin: expected a number >= 0"),
        ({"collect": {"min_coverage": 1.5}}, "collect.min_coverage: expected 0-1, got 1.5"),
        ({"collect": {"sweep_timeout_s": 0}}, "collect.sweep_timeout_s: expected a number >= 0.01"),
        ({"collect": {"sweep_timeout_s": "x"}}, "collect.sweep_timeout_s: expected a number"),
        (
            {"fabric": {"discover_timeout_s": 0}},
            "fabric.discover_timeout_s: expected a number >= 1",
        ),
        ({"fabric": {"routes": "smp"}}, "fabric.routes: expected one of auto, dump,"),
        ({"fabric": {"routes": "dump"}}, "fabric.lft_dump: required when fabric.routes is dump"),
        ({"tuning": {"lft_dump": "/x"}}, "tuning.lft_dump"),  # moved to fabric.lft_dump
        ({"tuning": {"objective": "fastest"}}, "tuning.objective"),
    ],
)
def test_bad_values_name_their_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "c.yaml")
    assert str(err.value).startswith("c.yaml: ")
    assert message in str(err.value)


def test_the_slurm_source_and_the_sl_hand_off() -> None:
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


def test_every_problem_is_reported_at_once_one_per_line() -> None:
    doc = {
        "mode": "on",
        "fabric": {"source": "file"},
        "collect": {"window": 0, "windw": 4, "backend": "snmp"},
        "classify": {"tau_s": -1},
        "metrics": {"listen": "9683", "tls": {"key_file": "/nonexistent"}},
        "colour": 1,
    }
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "c.yaml")
    collect_keys = ", ".join(f.name for f in dataclasses.fields(CollectConfig))
    assert str(err.value).splitlines() == [
        "c.yaml: mode: expected one of observe, enforce, got 'on'",
        "c.yaml: fabric.path: required when fabric.source is file",
        "c.yaml: collect.backend: expected one of native, perfquery, replay, got 'snmp'",
        "c.yaml: collect.window: expected an integer >= 1, got 0",
        f"c.yaml: collect.windw: unknown key (expected one of {collect_keys})",
        "c.yaml: classify.tau_s: expected a number >= 0, got -1",
        "c.yaml: metrics.listen: expected host:port (e.g. 127.0.0.1:9683), got '9683'",
        "c.yaml: metrics.tls.cert_file: expected a non-empty string, got None",
        "c.yaml: metrics.tls.key_file: cannot read /nonexistent: No such file or directory",
        "c.yaml: colour: unknown key (expected one of mode, opensm, jobs, slurm, fabric,"
        " collect, classify, lanes, tuning, agent, metrics, profiles, lab)",
    ]
    assert isinstance(err.value.__cause__, FileNotFoundError)  # the first problem's cause


def test_a_file_s_problems_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ibqos.yaml"
    path.write_text("collect:\n  window: 0\n  retries: -1\nsource: x\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).splitlines() == [
        f"{path}: collect.window: expected an integer >= 1, got 0",
        f"{path}: collect.retries: expected an integer >= 0, got -1",
        f"{path}: source: unknown key (expected one of mode, opensm, jobs, slurm, fabric,"
        " collect, classify, lanes, tuning, agent, metrics, profiles, lab)",
    ]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "c.yaml: top level: expected a mapping, got list"),
        ({"lab": None}, "c.yaml: lab: expected a mapping, got NoneType"),
        ({"lab": {"name": "l"}}, "c.yaml: lab.dir: expected a non-empty string, got None"),
        ({1: 2}, "c.yaml: 1: unknown key (expected one of mode, opensm, jobs, slurm,"),
    ],
)
def test_the_document_s_shape(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "c.yaml")
    assert str(err.value).startswith(message)


def test_sections_are_frozen() -> None:
    cfg = parse_config({}, "c.yaml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.collect.window = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.mode = "enforce"  # type: ignore[misc]


def test_code_builds_and_replaces_sections_as_dataclasses(tmp_path: Path) -> None:
    """The CLI replaces collect's backend; tests and tools build sections from values."""
    cfg = parse_config({}, "c.yaml").collect
    replay = dataclasses.replace(cfg, backend="replay", replay_path=tmp_path)
    assert (replay.backend, replay.replay_path, replay.window) == ("replay", tmp_path, 32)
    with pytest.raises(ValueError, match=r"required when collect\.backend is replay"):
        dataclasses.replace(cfg, backend="replay")
    assert MetricsConfig(listen=("127.0.0.1", 0)).listen == ("127.0.0.1", 0)
    assert SlurmConfig(squeue=("sq",), notify_dir=None).squeue == ("sq",)
    assert vars(AgentConfig()) == {
        f.name: getattr(AgentConfig(), f.name) for f in dataclasses.fields(AgentConfig)
    }  # `ibqos show-config`


def test_the_tuning_objective_is_node_time_unless_worst_job_is_asked() -> None:
    assert parse_config({}, "c.yaml").tuning.objective == "node-time"
    cfg = parse_config({"tuning": {"objective": "worst-job"}}, "c.yaml")
    assert cfg.tuning.objective == "worst-job"
