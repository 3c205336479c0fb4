"""Observe mode keeps what it would write and logs a proposal once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ibqos.opensm.observe import Observer


def test_proposals_are_kept_and_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf, policy = tmp_path / "opensm.conf", tmp_path / "qos-policy.conf"
    conf.write_text("qos FALSE\n")
    before = conf.read_bytes()
    observer = Observer(tmp_path / "state")
    new = {conf: "qos TRUE\n", policy: "qos-ulps\ndefault : 0\nend-qos-ulps\n"}
    with caplog.at_level(logging.INFO, "ibqos.opensm.observe"):
        assert observer.show(new) == (conf, policy)
        assert observer.show(new) == (conf, policy)  # the same proposal: not logged again
        assert observer.show({conf: "qos FALSE\n"}) == ()
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2, logged
    assert "would change opensm.conf, qos-policy.conf (+4 -1 lines)" in logged[0]
    assert logged[1] == "observe: OpenSM's files already match the plan"
    assert conf.read_bytes() == before and not policy.exists()  # OpenSM's files untouched
    kept = tmp_path / "state" / "observe"
    assert (kept / "opensm.conf").read_text() == "qos FALSE\n"
    assert (kept / "proposed.diff").read_text() == "# OpenSM's files already match\n"
