"""Lane capabilities read with smpquery from a real lab (ibsim + OpenSM + infiniband-diags).

ibsim simulates VLCap and OperVLs VL0-7 and both VLArb caps 8 on every port (docs/design.md
§8.5).  The MTU is checked against what OpenSM itself reports for a path: the SA's
PathRecord MTU, the smallest NeighborMTU OpenSM found along the route.
"""

from __future__ import annotations

import re

from ibqos.collect.portinfo import SmpqueryRunner, read_lane_caps, sample_ports
from ibqos.lab.fabric import fabric_from_lab

QUIET = {"sweep_interval": "0"}  # no periodic OpenSM sweeps while the test looks
MTU_CODES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}  # PathRecord MTU (IBA 15.2.5.16)


def path_mtu(lab, src: int, dst: int) -> int:
    """The MTU OpenSM answers in a PathRecord from LID *src* to LID *dst*, bytes."""
    out = lab.run(["saquery", "-p", "--src-to-dst", f"{src}:{dst}"], check=True).stdout
    m = re.search(r"^\s*mtu\.+0x([0-9a-fA-F]+)$", out, flags=re.MULTILINE)
    assert m is not None, out
    return MTU_CODES[int(m.group(1), 16) & 0x3F]  # the top two bits are the selector


def test_lane_caps_of_a_lab(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    fabric = fabric_from_lab(lab)
    runner = SmpqueryRunner(env=lab.env(), cwd=lab.paths.run)
    before = set(lab.paths.run.iterdir())  # OpenSM's own umad2sim sys-<pid>/
    caps = read_lane_caps(fabric, runner=runner, workers=4)
    assert (caps.data_vls, caps.vlarb_low_cap, caps.vlarb_high_cap) == (8, 8, 8)
    cas = [t for t in fabric.targets() if not t.is_switch]
    assert caps.mtu == path_mtu(lab, cas[0].lid, cas[-1].lid) == 2048
    assert (caps.ports_read, caps.ports_failed, caps.warnings) == (4 + 9, 0, ())
    for p in caps.ports:
        assert (p.vl_cap, p.oper_vls, p.mtu_cap, p.link_state) == (8, 8, 2048, "Active")
    assert {p.sl_mapping for p in caps.ports if p.lid in {t.lid for t in cas}} == {True}
    assert caps.describe() == (
        "lanes: 8 data VLs, VLArb low 8 / high 8 entries, MTU 2048 bytes "
        "(13 ports read, 0 failed, 0 warnings)"
    )
    assert set(lab.paths.run.iterdir()) == before  # each smpquery removed its sys-<pid>/


def test_a_port_that_drops_portinfo_fails_alone(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    fabric = fabric_from_lab(lab)
    sample = sample_ports(fabric.targets(), sample_cas=3)
    mute = sample[-1]  # a CA port: ibsim drops every PortInfo (0x0015) MAD it receives
    node = next(fp.node_id for fp in fabric.ports.values() if fp.node_guid == mute.node_guid)
    assert lab.ibsim is not None
    assert lab.ibsim.command([f'Error "{node}"[{mute.port}] 100 0x15']) == []
    runner = SmpqueryRunner(2.5, env=lab.env(), cwd=lab.paths.run)
    caps = read_lane_caps(fabric, sample_cas=3, runner=runner)
    assert (caps.ports_read, caps.ports_failed) == (4 + 2, 1)
    assert (caps.data_vls, caps.vlarb_low_cap, caps.vlarb_high_cap, caps.mtu) == (8, 8, 8, 2048)
    (warning,) = caps.warnings
    # ibsim fails the dropped MAD at once; smpquery says so, it is not killed at the limit
    want = (
        rf"PortInfo of 0x{mute.node_guid:016x}\[{mute.port}\] \(lid {mute.lid}\): smpquery "
        rf"exited 255: ibwarn: \[\d+\] mad_rpc: _do_madrpc failed; dport \(Lid {mute.lid}\)"
    )
    assert re.fullmatch(want, warning), warning
