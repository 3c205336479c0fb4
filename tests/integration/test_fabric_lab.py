"""The fabric model against a real lab: live ibnetdiscover (SMPs through umad2sim to ibsim)
versus the lab's own topology, and a link pulled with ibsim's console."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from ibqos.fabric.diff import FabricChange, diff_fabrics
from ibqos.fabric.model import fabric_from_ibnetdiscover
from ibqos.lab.fabric import fabric_from_lab
from ibqos.lab.lab import Lab

QUIET = {"sweep_interval": "0"}  # no periodic OpenSM sweeps while the test looks


def live(lab: Lab):
    """The lab's fabric as ibnetdiscover finds it from the OpenSM host."""
    return fabric_from_ibnetdiscover(env=lab.env(), cwd=lab.paths.run, timeout=60)


def by_key(targets):
    return sorted(targets, key=lambda t: (t.node_guid, t.port))


@pytest.mark.parametrize(
    ("xgft", "roles"),
    [
        # 8 hosts + SM; leaves: 9 host ports + 2x2 down from spines; 2 leaves x 2 up
        ("2;4,2;1,2", {"host": 9, "down": 9 + 4, "up": 4}),
        # 16 hosts + SM; 4 leaves x 2 up, 4 level-2 switches x 2 up
        ("3;4,2,2;1,2,2", {"host": 17, "down": 17 + 8 + 8, "up": 8 + 8}),
    ],
)
def test_live_discovery_agrees_with_the_lab(make_lab, caplog, xgft, roles):
    lab = make_lab(xgft, opensm_options=QUIET)
    with caplog.at_level(logging.WARNING, logger="ibqos"):
        found = live(lab)
    assert [r.getMessage() for r in caplog.records] == []  # ibnetdiscover said nothing odd
    direct = fabric_from_lab(lab)
    assert direct.source == f"lab {lab.paths.name}"  # the lab's own topology, with its LIDs
    assert by_key(found.targets()) == by_key(direct.targets())
    assert Counter(t.role for t in found.targets()) == roles
    assert found.height == int(xgft[0])
    # another process's view of the lab: no LIDs in memory, the recorded discovery instead
    reopened = fabric_from_lab(Lab(lab.paths))
    assert reopened.source == str(lab.paths.discovered)
    assert by_key(reopened.targets()) == by_key(found.targets())


def test_unlinked_port_pair_is_reported_gone(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    before = live(lab)
    up = next(fp for fp in before.ports.values() if fp.role == "up")
    pair = tuple(sorted([(up.node_guid, up.num), (up.peer_guid, up.peer.num)]))
    assert lab.ibsim is not None
    assert lab.ibsim.command([f'Unlink "{up.node_id}"[{up.num}]']) == []
    after = live(lab)
    change = diff_fabrics(before, after)
    assert change == FabricChange(ports_gone=pair)
    assert str(change).startswith("fabric changed: 2 ports gone (sw-L1-")
    assert after.uplink_capacity_bytes_per_s(1) == before.uplink_capacity_bytes_per_s(1) - 12.5e9
    assert lab.ibsim.command([f'ReLink "{up.node_id}"[{up.num}]']) == []
    assert diff_fabrics(after, live(lab)) == FabricChange(ports_added=pair)
