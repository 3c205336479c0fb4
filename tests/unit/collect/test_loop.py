"""The collection loop: rates across sweeps, and topology changes noticed between them."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.collect.loop import Collector
from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Sweep, empty_table
from ibqos.config.models import CollectConfig
from ibqos.errors import TopologyError
from ibqos.fabric.model import Fabric, fabric_from_text
from tests.support.paths import TESTS
from tests.support.recordings import recorded

DATA = TESTS / "data" / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"
CN0001_LINK = '"H-0c42a10301000000"'


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


# -- coverage, implausible samples, failed re-reads of the topology ---------------------


def record_with(path: Path, fabric: Fabric, sweeps: int, *, failing=(), jump=()) -> None:
    """Sweeps one second apart, 1 MB/s on every port; from the second sweep on, the rows
    in *failing* did not answer and those in *jump* moved by 10 TB (counters rewritten)."""
    targets = fabric.targets()
    rec = SweepRecorder(path)
    for k in range(sweeps):
        table = empty_table(targets)
        values = [k * 1_000_000 + (10**13 if k and i in jump else 0) for i in range(len(targets))]
        for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait"):
            table[col] = pd.array(values, dtype="UInt64")
        table["time_s"] = 1000.0 + k
        table["counter_bits"] = pd.Series([64] * len(targets), dtype="uint8")
        table["error"] = [
            "no reply after 3 tries (0.5 s each)" if k and i in failing else ""
            for i in range(len(targets))
        ]
        for i in failing if k else ():
            table.loc[i, ["xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait"]] = pd.NA
            table.loc[i, "time_s"] = float("nan")
        rec.record(Sweep(targets, table, "native", 1000.0 + k, 0.01))


def test_a_sweep_with_silent_ports_is_one_warning_with_its_coverage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fabric = fabric_from_text(DATA.read_text(), str(DATA))
    n = len(fabric.targets())
    failing = range(n // 2)
    record_with(tmp_path / "rec", fabric, 2, failing=failing)
    cfg = CollectConfig(backend="replay", replay_path=tmp_path / "rec")
    with Collector(cfg, fabric) as collector:
        assert not collector.covered  # no sweep yet
        collector.step()
        assert collector.last is not None and collector.last.coverage == 1.0
        assert collector.covered
        caplog.clear()
        with caplog.at_level(logging.DEBUG, "ibqos.collect"):
            collector.step()
    sweep = collector.last
    assert sweep is not None and sweep.failed == n // 2 and sweep.answered == n - n // 2
    assert sweep.coverage == pytest.approx((n - n // 2) / n)
    assert not collector.covered  # below collect.min_coverage 0.9
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    first = fabric.targets()[0]
    assert (
        lines[0]
        .getMessage()
        .startswith(
            f"sweep reached {n - n // 2} of {n} ports in 0.010 s (native); {n // 2} did not answer,"
            f" e.g. {first.node_desc} port {first.port} (no reply after 3 tries (0.5 s each)), "
        )
    )
    assert (
        lines[0]
        .getMessage()
        .endswith(f"(coverage {(n - n // 2) / n:.2f}, below collect.min_coverage 0.9)")
    )


def test_implausible_samples_count_against_coverage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fabric = fabric_from_text(DATA.read_text(), str(DATA))
    n = len(fabric.targets())
    record_with(tmp_path / "rec", fabric, 2, jump={0, 1})
    cfg = CollectConfig(backend="replay", replay_path=tmp_path / "rec", min_coverage=0.5)
    with Collector(cfg, fabric) as collector, caplog.at_level(logging.WARNING, "ibqos.collect"):
        collector.step()
        rates = collector.step()
    sweep = collector.last
    assert sweep is not None and (sweep.failed, sweep.invalid) == (0, 2)
    assert sweep.coverage == pytest.approx((n - 2) / n) and collector.covered
    assert rates["xmit_bytes_per_s"].isna().tolist()[:3] == [True, True, False]
    assert collector.tracker.invalid_samples == 2
    text = caplog.text
    assert "dropped 2 implausible sample(s)" in text
    assert (
        f"sweep reached {n} of {n} ports" in text and "2 sample(s) dropped as implausible" in text
    )


def test_a_failed_reread_of_the_topology_keeps_the_last_one_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fabric = fabric_from_text(DATA.read_text(), str(DATA))
    recorded(tmp_path / "rec", fabric, 2)
    cfg = CollectConfig(backend="replay", replay_path=tmp_path / "rec", replay_loop=True)
    tries: list[float] = []
    works = False

    def discover() -> Fabric:
        tries.append(time.monotonic())
        time.sleep(0.3)  # a discovery that runs into its timeout
        if not works:
            raise TopologyError("ibnetdiscover: no answer within 60 s")
        return fabric

    with caplog.at_level(logging.INFO, "ibqos.collect"):
        with Collector(cfg, fabric, discover=discover, refresh_s=0.2) as collector:
            collector._seen_s -= 1  # due now
            for _ in range(2):  # the next try is refresh_s after the last one *ended*
                collector.step()
            assert len(tries) == 1
            time.sleep(0.25)
            collector.step()
            assert len(tries) == 2 and collector.fabric is fabric
            works = True
            time.sleep(0.25)
            collector.step()
            assert len(tries) == 3
    said = [r.getMessage() for r in caplog.records if "topolog" in r.getMessage()]
    assert said == [
        f"topology not re-read, keeping the last one ({len(fabric.targets())} ports) until a"
        " re-read works (tried every 0.2 s): ibnetdiscover: no answer within 60 s",
        "topology read again",
    ]
