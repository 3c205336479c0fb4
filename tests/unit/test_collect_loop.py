"""The collection loop: rates across sweeps, and topology changes noticed between them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.collect.loop import Collector
from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Sweep, empty_table
from ibqos.config.models import CollectConfig
from ibqos.fabric.model import Fabric, fabric_from_text

DATA = Path(__file__).parent.parent / "data" / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"
CN0001_LINK = '"H-0c42a10301000000"'


def recorded(path: Path, fabric: Fabric, sweeps: int) -> None:
    """A recording of *sweeps* sweeps, one second apart, every port moving 1 MB/s."""
    targets = fabric.targets()
    rec = SweepRecorder(path)
    for k in range(sweeps):
        table = empty_table(targets)
        for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait"):
            table[col] = pd.array([k * 1_000_000] * len(targets), dtype="UInt64")
        table["time_s"] = 1000.0 + k
        table["counter_bits"] = pd.Series([64] * len(targets), dtype="uint8")
        table["error"] = ""
        rec.record(Sweep(targets, table, "native", 1000.0 + k, 0.01))


def test_rates_come_from_the_second_sweep_on(tmp_path: Path) -> None:
    fabric = fabric_from_text(DATA.read_text(), str(DATA))
    recorded(tmp_path / "rec", fabric, 3)
    cfg = CollectConfig(backend="replay", replay_path=tmp_path / "rec")
    tables: list[pd.DataFrame] = []
    with Collector(cfg, fabric) as collector:
        collector.run(2, 0.0, tables.append)
    assert len(tables) == 2
    for t in tables:
        assert (t["xmit_bytes_per_s"] == 1e6).all() and (t["interval_s"] == 1.0).all()
    assert list(tables[0]["role"].unique()) == ["down", "up", "host"]


def test_a_vanished_link_is_noticed_and_its_ports_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = DATA.read_text()
    fabric = fabric_from_text(text, "before")
    recorded(tmp_path / "rec", fabric, 2)
    # cn0001 unplugged: the leaf's line for it and the CA's own link line are gone
    after = "\n".join(
        line for line in text.splitlines() if not (CN0001_LINK in line and line.startswith("["))
    )
    after = after.replace('[1](c42a10301000001) \t"S-', "#")
    cfg = CollectConfig(backend="replay", replay_path=tmp_path / "rec")
    with caplog.at_level(logging.WARNING, "ibqos.collect"):
        with Collector(
            cfg, fabric, discover=lambda: fabric_from_text(after, "after"), refresh_s=0.0
        ) as collector:
            before = len(collector.targets)
            rates = collector.step()
    assert len(collector.targets) == before - 2
    assert len(rates) == before - 2
    assert "fabric changed" in caplog.text and "2 ports gone" in caplog.text


def test_collect_replays_a_recording_without_a_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fabric = fabric_from_text(DATA.read_text(), str(DATA))
    recorded(tmp_path / "rec", fabric, 3)
    monkeypatch.setenv("IBQOS_CONFIG", str(tmp_path / "ibqos.yaml"))
    (tmp_path / "ibqos.yaml").write_text("fabric:\n  source: ibnetdiscover\n")  # never run
    with caplog.at_level(logging.INFO, "ibqos.collect"):
        result = CliRunner().invoke(
            cli, ["collect", "--replay", str(tmp_path / "rec"), "--format", "json"]
        )
    assert result.exit_code == 0, result.output
    tables = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(tables) == 2  # three sweeps, then the recording ends: a normal end
    assert all(len(t) == len(fabric.targets()) for t in tables)
    assert {r["xmit_bytes_per_s"] for t in tables for r in t} == {1e6}
    assert "exhausted after 3 sweeps" in caplog.text
