"""Another writer rewrites OpenSM's files (config management): ibqos holds, not fights."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from ibqos.agent.sinks import enforce
from ibqos.agent.state import AgentState
from ibqos.agent.status import render_status
from ibqos.errors import OpenSMHeld
from ibqos.metrics import AgentMetrics, Counters
from ibqos.opensm.apply import Applier
from ibqos.opensm.conf import render_conf
from ibqos.opensm.hold import HOLD_FILE, QUIET_CAP_S, WRITTEN_FILE, load_hold
from tests.unit.opensm.test_apply_faults import FakeOpenSM

TEMPLATE = "# managed by config management\nlog_max_size 0\nqos FALSE\n"
POLICY = "qos-ulps\ndefault : 0\nend-qos-ulps\n"


def make(tmp_path: Path, quiet_s: float = 60.0) -> tuple[Applier, FakeOpenSM, Path, Path]:
    conf, policy, log = tmp_path / "opensm.conf", tmp_path / "qos-policy.conf", tmp_path / "log"
    conf.write_text(TEMPLATE)
    policy.write_text(POLICY)
    log.write_text("")
    osm = FakeOpenSM(log, policy)
    return applier(tmp_path, osm, quiet_s), osm, conf, policy


def applier(tmp_path: Path, osm: FakeOpenSM, quiet_s: float = 60.0) -> Applier:
    state = tmp_path / "state"
    return Applier(
        state,
        osm,
        osm.log,
        sweep_timeout_s=1.0,
        hold_file=state / HOLD_FILE,
        written_file=state / WRITTEN_FILE,
        outside_quiet_s=quiet_s,
    )


def rendered(conf: Path, policy: Path, sl: int = 1) -> dict[Path, str | None]:
    """The files as ibqos renders them from the disk: its block in the admin's conf."""
    values = {"qos": "TRUE", "qos_ca_sl2vl": ",".join([str(sl)] * 16)}
    return {conf: render_conf(conf.read_text(), values), policy: policy.read_text()}


def rewrite(path: Path, text: str) -> None:
    """What config management does: a temporary file renamed over the target."""
    tmp = path.with_name(f".{path.name}.cm")
    tmp.write_text(text)
    os.replace(tmp, path)


def age(applier: Applier, seconds: float) -> None:
    """Make the other writer's last rewrite *seconds* older (a clock for the quiet period)."""
    state = applier.state_dir / HOLD_FILE
    doc = json.loads(state.read_text())
    doc["changed_s"] -= seconds
    state.write_text(json.dumps(doc))
    applier._hold = load_hold(state)  # as a restarted agent would read it


def test_a_template_rewritten_every_few_seconds_costs_no_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The measured storm: config management puts its template (no ibqos block) back every
    5 s without signalling OpenSM.  Before: an apply and a reload at each rewrite, as the
    budget allowed.  Now: the first rewrite seen holds, and nothing is written."""
    ap, osm, conf, policy = make(tmp_path)
    counters = Counters()
    assert enforce(ap, rendered(conf, policy), None, counters).ok
    assert osm.calls == 1 and "BEGIN ibqos" in conf.read_text()
    caplog.set_level(logging.WARNING)
    for _ in range(16):  # 80 s of rewrites, a cycle after each
        rewrite(conf, TEMPLATE)
        with pytest.raises(OpenSMHeld, match="rewritten by another writer"):
            enforce(ap, rendered(conf, policy), None, counters)
    assert osm.calls == 1 and conf.read_text() == TEMPLATE  # no reload, nothing written
    assert counters.outside_writes == 16 and counters.outside_writer
    assert not counters.opensm_rejected
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # one line, saying what to do
    assert "opensm.conf" in errors[0] and "keep ibqos's managed blocks out of" in errors[0]
    metrics = AgentMetrics(counters, fabric="f", routing_engine="ftree", dry_run=False)
    samples = {(m.name, s.name): s.value for m in metrics.registry.collect() for s in m.samples}
    assert samples["ibqos_opensm_outside_writes", "ibqos_opensm_outside_writes_total"] == 16
    assert samples["ibqos_opensm_outside_writer", "ibqos_opensm_outside_writer"] == 1
    assert samples["ibqos_opensm_rejected", "ibqos_opensm_rejected"] == 0
    # a restarted agent holds too (the hold and the record are in the state directory)
    again = applier(tmp_path, osm)
    assert again.outside_writer
    with pytest.raises(OpenSMHeld):
        again.apply(rendered(conf, policy))
    shown = render_status(AgentState(mode="enforce"), tmp_path / "state")
    assert "HELD since" in shown and "carry its blocks again or stand unchanged for 60 s" in shown


def test_the_hold_ends_after_the_quiet_period_with_one_write(tmp_path: Path) -> None:
    ap, osm, conf, policy = make(tmp_path, quiet_s=60.0)
    ap.apply(rendered(conf, policy))
    rewrite(conf, TEMPLATE)
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    age(ap, 30)
    with pytest.raises(OpenSMHeld):  # not quiet long enough
        ap.apply(rendered(conf, policy))
    rewrite(conf, TEMPLATE)  # the same bytes again: a rewrite all the same
    age(ap, 59)
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    assert ap.outside_writes == 2
    age(ap, 61)
    result = ap.apply(rendered(conf, policy))  # written once more
    assert result.ok and osm.calls == 2 and not ap.outside_writer
    # the writer comes back within the hour: held again, for twice as long
    rewrite(conf, TEMPLATE)
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    hold = load_hold(tmp_path / "state" / HOLD_FILE)
    assert hold is not None and hold.quiet_s == 120.0
    age(ap, 100)
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    assert osm.calls == 2


def test_the_quiet_period_doubles_up_to_an_hour(tmp_path: Path) -> None:
    ap, _osm, conf, policy = make(tmp_path, quiet_s=1000.0)
    ap.apply(rendered(conf, policy))
    quiet = []
    for _ in range(4):
        rewrite(conf, TEMPLATE)
        with pytest.raises(OpenSMHeld):
            ap.apply(rendered(conf, policy))
        assert ap._hold is not None
        quiet.append(ap._hold.quiet_s)
        age(ap, QUIET_CAP_S + 1)
        assert ap.apply(rendered(conf, policy)).ok
    assert quiet == [1000.0, 2000.0, QUIET_CAP_S, QUIET_CAP_S]


def test_the_hold_ends_when_the_files_carry_ibqos_lines_again(tmp_path: Path) -> None:
    """The admin keeps ibqos's block out of the template now (and put it back once)."""
    ap, osm, conf, policy = make(tmp_path)
    ap.apply(rendered(conf, policy))
    mine = conf.read_text()
    rewrite(conf, TEMPLATE)
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    rewrite(conf, mine)
    result = ap.apply(rendered(conf, policy))
    assert result.ok and not result.changed and not ap.outside_writer and osm.calls == 1
    assert not (tmp_path / "state" / HOLD_FILE).exists()
    assert ap.apply(rendered(conf, policy, sl=2)).ok and osm.calls == 2  # a new plan: applied


def test_an_admin_edit_outside_the_block_is_not_another_writer(tmp_path: Path) -> None:
    ap, osm, conf, policy = make(tmp_path)
    ap.apply(rendered(conf, policy))
    conf.write_text("# edited by hand\n" + conf.read_text())
    assert not ap.apply(rendered(conf, policy)).changed  # nothing to write: ibqos's lines stand
    conf.write_text(conf.read_text() + "qos_max_vls 8\n")
    assert ap.apply(rendered(conf, policy, sl=2)).ok  # with a new plan: applied at once
    assert osm.calls == 2 and ap.outside_writes == 0 and not ap.outside_writer
    # a template that differs from the admin's part ibqos last saw costs one apply, and the
    # next rewrite with it holds
    rewrite(conf, TEMPLATE + "# a new template version\n")
    assert ap.apply(rendered(conf, policy, sl=2)).ok and osm.calls == 3
    rewrite(conf, TEMPLATE + "# a new template version\n")
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy, sl=2))
    assert osm.calls == 3 and ap.outside_writes == 1


def test_a_managed_key_put_back_outside_the_block_is_another_writer(tmp_path: Path) -> None:
    """A line-based tool (Puppet file_line, Ansible lineinfile) that sets ``qos FALSE``."""
    ap, osm, conf, policy = make(tmp_path)
    ap.apply(rendered(conf, policy))
    conf.write_text(conf.read_text() + "qos FALSE\n")
    with pytest.raises(OpenSMHeld):
        ap.apply(rendered(conf, policy))
    assert osm.calls == 1


def test_the_record_is_kept_across_restarts(tmp_path: Path) -> None:
    ap, osm, conf, policy = make(tmp_path)
    ap.apply(rendered(conf, policy))
    doc = json.loads((tmp_path / "state" / WRITTEN_FILE).read_text())
    assert set(doc["files"]) == {str(conf), str(policy)}
    rewrite(conf, TEMPLATE)
    time.sleep(0.01)
    with pytest.raises(OpenSMHeld):  # a new agent tells the rewrite from its record
        applier(tmp_path, osm).apply(rendered(conf, policy))
