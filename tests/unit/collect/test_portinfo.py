"""PortInfo lane capabilities: parsing recorded ``smpquery portinfo`` outputs, the sample
of ports, the reduction with an injected runner, and the subprocess runner driven through
a fake ``smpquery`` that replays the recordings."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import stat
import sys
import threading
import time

import pytest

from ibqos.collect.portinfo import (
    LaneCaps,
    PortVLInfo,
    SmpqueryRunner,
    parse_portinfo,
    read_lane_caps,
    sample_ports,
)
from ibqos.errors import MadError, PortInfoError
from ibqos.fabric.model import fabric_from_file, fabric_from_text
from tests.support.paths import TESTS

DATA = TESTS / "data"
SMP = DATA / "smpquery"
CASES = sorted(p.name for p in SMP.iterdir() if (p / "argv.json").exists())
ANSWERED = [c for c in CASES if (SMP / c / "returncode.txt").read_text().strip() == "0"]
BIG = DATA / "lab-xgft-3_8.4.4_1.2.2" / "ibnetdiscover.txt"  # 28 switches, 129 CAs
SMALL = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"  # 6 switches, 33 CAs


def case(name: str) -> dict[str, object]:
    d = SMP / name
    return {
        "argv": json.loads((d / "argv.json").read_text()),
        "stdout": (d / "stdout.txt").read_text(),
        "stderr": (d / "stderr.txt").read_text(),
        "rc": int((d / "returncode.txt").read_text()),
    }


def stdout(name: str) -> str:
    return str(case(name)["stdout"])


def dotted(text: str) -> dict[str, str]:
    """Every ``Name:....value`` line, read independently of the parser."""
    return {
        m.group(1): m.group(2) for m in re.finditer(r"^(\w+):\.*(.*)$", text, flags=re.MULTILINE)
    }


def answer(lid: int, port: int, name: str = "ca", **changes: str) -> str:
    """A recorded reply, renumbered, with some fields changed."""
    text = re.sub(
        r"^# Port info: Lid \d+ port \d+$",
        f"# Port info: Lid {lid} port {port}",
        stdout(name),
        count=1,
        flags=re.MULTILINE,
    )
    for key, value in changes.items():
        text, n = re.subn(rf"^{key}:\.*.*$", f"{key}:....{value}", text, flags=re.MULTILINE)
        assert n == 1, key
    return text


# -- the parser ---------------------------------------------------------------------
def test_every_recorded_case_is_there():
    assert set(CASES) >= {"ca", "ca-sm", "leaf-down", "spine", "switch-port0", "bad-lid"}
    assert set(CASES) - set(ANSWERED) == {"bad-lid", "bad-port"}


@pytest.mark.parametrize("name", ANSWERED)
def test_recorded_outputs_parse_as_recorded(name):
    c = case(name)
    raw = dotted(str(c["stdout"]))
    info = parse_portinfo(str(c["stdout"]), name, node_guid=0x1234)
    assert (info.lid, info.port) == (int(c["argv"][2]), int(c["argv"][3]))
    assert info.node_guid == 0x1234
    # ibsim simulates the same lanes on every port (docs/design.md §8.5)
    assert raw["VLCap"] == raw["OperVLs"] == "VL0-7"
    assert (info.vl_cap, info.oper_vls, info.data_vls) == (8, 8, 8)
    assert raw["VLArbHighCap"] == raw["VLArbLowCap"] == "8"
    assert (info.vlarb_high_cap, info.vlarb_low_cap) == (8, 8)
    assert info.mtu_cap == int(raw["MtuCap"])
    assert info.neighbor_mtu == int(raw["NeighborMTU"])
    assert info.link_state == raw["LinkState"]
    assert info.sl_mapping == bool(int(raw["CapMask"], 16) & 0x40)


def test_recorded_values_per_kind_of_port():
    ca = parse_portinfo(stdout("ca"), "ca")
    assert (ca.lid, ca.port, ca.mtu_cap, ca.neighbor_mtu) == (2, 1, 2048, 2048)
    assert ca.sl_mapping is True and ca.has_link
    assert parse_portinfo(stdout("ca-sm"), "ca-sm").sl_mapping is True
    # a switch's external port shows CapMask 0x0: nothing listed under it
    leaf = parse_portinfo(stdout("leaf-down"), "leaf")
    assert leaf.sl_mapping is False and leaf.neighbor_mtu == 2048
    port0 = parse_portinfo(stdout("switch-port0"), "port0")
    assert (port0.port, port0.mtu_cap, port0.neighbor_mtu, port0.sl_mapping) == (0, 1024, 256, True)
    down = parse_portinfo(stdout("switch-port-down"), "down")
    assert down.link_state == "Down" and not down.has_link


def test_no_capmask_line_gives_no_sl_mapping():
    text = re.sub(r"^CapMask:.*\n(\t.*\n)*", "", stdout("ca"), flags=re.MULTILINE)
    assert "CapMask:" not in text and "IsSLMapping" not in text
    assert parse_portinfo(text, "ca").sl_mapping is None


@pytest.mark.parametrize(
    ("vlcap", "opervls", "vl_cap", "oper_vls", "data_vls"),
    [
        ("VL0", "VL0", 1, 1, 1),
        ("VL0-1", "VL0-1", 2, 2, 2),
        ("VL0-3", "VL0-3", 4, 4, 4),
        ("VL0-7", "VL0-3", 8, 4, 4),  # the SM enabled fewer than the port has
        ("VL0-14", "VL0-14", 15, 15, 15),
        ("VL0-7", "No change", 8, 0, 8),  # OperVLs unset: the capability counts
        ("VL0-3", "VL0-7", 4, 8, 4),  # never more than VLCap
    ],
)
def test_vl_encodings(vlcap, opervls, vl_cap, oper_vls, data_vls):
    info = parse_portinfo(answer(2, 1, VLCap=vlcap, OperVLs=opervls), "ca")
    assert (info.vl_cap, info.oper_vls, info.data_vls) == (vl_cap, oper_vls, data_vls)


@pytest.mark.parametrize("mtu", [256, 512, 1024, 2048, 4096])
def test_mtu_encodings(mtu):
    info = parse_portinfo(answer(2, 1, NeighborMTU=str(mtu), MtuCap="4096"), "ca")
    assert (info.neighbor_mtu, info.mtu_cap) == (mtu, 4096)


def edit(old: str, new: str, name: str = "ca") -> str:
    text = stdout(name)
    assert old in text
    return text.replace(old, new, 1)


def ca(**changes: str) -> str:
    return answer(2, 1, "ca", **changes)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "smpquery portinfo 2 1: no output$"),
        ("\n\n", "no output$"),
        (stdout("ca")[:-5], "ends in the middle of a line"),
        (stdout("bad-port"), "not a PortInfo reply: 'smpquery: iberror: failed: "),
        ("# Port info: Lid 2 port 1\n", "lacks LinkState, NeighborMTU, VLCap, VLArbHighCap"),
        (ca(VLCap="?(6)"), r"VLCap: not a VL range: '\?\(6\)'$"),
        (ca(OperVLs="VL0-8"), "OperVLs: not a VL range: 'VL0-8'$"),
        (ca(NeighborMTU="?(0)"), "NeighborMTU: not an MTU"),
        (ca(MtuCap="2000"), "MtuCap: not an MTU: '2000'$"),
        (ca(VLArbLowCap="256"), "VLArbLowCap: expected 0-255, got '256'$"),
        (ca(VLArbHighCap="-1"), "VLArbHighCap: expected 0-255, got '-1'$"),
        (ca(CapMask="0xZZ"), "CapMask: not a hex number"),
        (edit("SMSL:", "VLCap:....VL0-7\nSMSL:"), r"line \d+: VLCap given twice$"),
        (edit("SMSL:", "garbage here\nSMSL:"), r"line \d+: cannot parse: 'garbage here'$"),
        (edit("SMSL:", "\tIsSM\nSMSL:"), "cannot parse: 'IsSM'$"),  # a flag under NeighborMTU
        (edit("LinkState:.......................Active\n", ""), "lacks LinkState$"),
    ],
)
def test_bad_text_is_one_clear_line(text, match):
    with pytest.raises(MadError, match=match) as err:
        parse_portinfo(text, "smpquery portinfo 2 1")
    msg = str(err.value)
    assert msg.startswith("smpquery portinfo 2 1: ") and "\n" not in msg
    assert err.value.category == "mad"


def test_every_truncation_is_caught_or_complete():
    text = stdout("ca")
    for cut in range(len(text)):
        try:
            info = parse_portinfo(text[:cut], "ca")
        except MadError:
            continue
        # what parses must be a complete, equal reading
        assert info == parse_portinfo(text, "ca"), cut


# -- the sample ---------------------------------------------------------------------
def test_sample_reads_every_switch_once_and_spreads_the_cas():
    fabric = fabric_from_file(BIG)
    targets = fabric.targets()
    got = sample_ports(targets, 32)
    switches = [t for t in got if t.is_switch]
    switch_guids = {t.node_guid for t in targets if t.is_switch}
    assert len(switches) == len(switch_guids) == 28
    assert {t.node_guid for t in switches} == switch_guids
    for t in switches:  # the lowest linked port of each switch, at the switch's LID
        ports = [u for u in targets if u.node_guid == t.node_guid]
        assert t.port == min(u.port for u in ports) and {u.lid for u in ports} == {t.lid}
    cas = sorted((t for t in targets if not t.is_switch), key=lambda t: (t.node_guid, t.port))
    picked = [t for t in got if not t.is_switch]
    assert len(cas) == 129 and len(picked) == 32
    index = [cas.index(t) for t in picked]
    assert index == sorted(set(index)) and index[0] == 0 and index[-1] >= 120
    steps = {b - a for a, b in itertools.pairwise(index)}
    assert steps <= {4, 5}  # 129 / 32: even steps over the sorted CA ports


@pytest.mark.parametrize(("n", "cas"), [(0, 0), (1, 1), (33, 33), (500, 33)])
def test_sample_cas_bounds_the_ca_ports(n, cas):
    got = sample_ports(fabric_from_file(SMALL).targets(), n)
    assert sum(not t.is_switch for t in got) == cas
    assert sum(t.is_switch for t in got) == 6
    assert len(set(got)) == len(got)


def test_sample_cas_must_not_be_negative():
    with pytest.raises(ValueError, match="sample_cas"):
        sample_ports([], -1)


# -- the reduction, with an injected runner ------------------------------------------
class Fake:
    """Answers ``smpquery portinfo LID PORT`` from recorded texts; records the calls."""

    def __init__(self, fabric, delay_s: float = 0.0) -> None:
        self.by_lid_port = {(t.lid, t.port): t for t in fabric.targets()}
        self.texts: dict[tuple[int, int], str] = {}
        self.fail: dict[tuple[int, int], Exception] = {}
        self.calls: list[list[str]] = []
        self.delay_s = delay_s
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, argv):
        with self._lock:
            self.calls.append(list(argv))
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.delay_s)
            assert argv[:2] == ["smpquery", "portinfo"]
            key = (int(argv[2]), int(argv[3]))
            if key in self.fail:
                raise self.fail[key]
            if key in self.texts:
                return self.texts[key]
            t = self.by_lid_port[key]
            return answer(t.lid, t.port, "leaf-down" if t.is_switch else "ca")
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def fabric():
    return fabric_from_file(SMALL)


def sampled(fabric, n=32):
    return sample_ports(fabric.targets(), n)


def test_uniform_fabric_gives_its_values_and_no_warning(fabric, caplog):
    fake = Fake(fabric)
    with caplog.at_level(logging.WARNING, logger="ibqos"):
        caps = read_lane_caps(fabric, runner=fake, workers=3)
    assert (caps.data_vls, caps.vlarb_low_cap, caps.vlarb_high_cap, caps.mtu) == (8, 8, 8, 2048)
    assert (caps.ports_read, caps.ports_failed, caps.warnings) == (6 + 32, 0, ())
    assert caplog.records == []
    want = [["smpquery", "portinfo", str(t.lid), str(t.port)] for t in sampled(fabric)]
    assert sorted(fake.calls) == sorted(want)
    assert [(p.node_guid, p.port) for p in caps.ports] == [
        (t.node_guid, t.port) for t in sampled(fabric)
    ]
    # a switch's external port has no CapabilityMask of its own; a CA port does
    kinds = {(t.is_switch, p.sl_mapping) for p, t in zip(caps.ports, sampled(fabric), strict=True)}
    assert kinds == {(True, None), (False, True)}
    assert caps.describe() == (
        "lanes: 8 data VLs, VLArb low 8 / high 8 entries, MTU 2048 bytes "
        "(38 ports read, 0 failed, 0 warnings)"
    )


def test_the_weakest_port_sets_each_value_and_is_named(fabric, caplog):
    fake = Fake(fabric)
    targets = sampled(fabric)
    sw, ca1, ca2 = targets[1], targets[7], targets[9]
    fake.texts[(sw.lid, sw.port)] = answer(sw.lid, sw.port, "leaf-down", OperVLs="VL0-3")
    fake.texts[(ca1.lid, ca1.port)] = answer(
        ca1.lid, ca1.port, NeighborMTU="1024", VLArbHighCap="4"
    )
    fake.texts[(ca2.lid, ca2.port)] = answer(ca2.lid, ca2.port, VLArbLowCap="2")
    with caplog.at_level(logging.WARNING, logger="ibqos"):
        caps = read_lane_caps(fabric, runner=fake)
    assert (caps.data_vls, caps.vlarb_low_cap, caps.vlarb_high_cap, caps.mtu) == (4, 2, 4, 1024)
    assert caps.ports_failed == 0
    name = {t: f"0x{t.node_guid:016x}[{t.port}]" for t in (sw, ca1, ca2)}
    assert caps.warnings == (
        f"PortInfo: data VLs differ: 1 of 38 ports have 4 (others up to 8), e.g. {name[sw]}",
        f"PortInfo: VLArbLowCap differ: 1 of 38 ports have 2 (others up to 8), e.g. {name[ca2]}",
        f"PortInfo: VLArbHighCap differ: 1 of 38 ports have 4 (others up to 8), e.g. {name[ca1]}",
        f"PortInfo: NeighborMTU differ: 1 of 38 ports have 1024 (others up to 2048), "
        f"e.g. {name[ca1]}",
    )
    assert [r.getMessage() for r in caplog.records] == list(caps.warnings)


def test_failures_are_counted_and_warned_a_few_at_a_time(fabric):
    fake = Fake(fabric)
    targets = sampled(fabric)
    bad = targets[2:8]
    for t in bad:
        fake.fail[(t.lid, t.port)] = PortInfoError("smpquery exited 255: iberror: x")
    wrong = targets[10]  # answers for another port
    fake.texts[(wrong.lid, wrong.port)] = answer(wrong.lid, wrong.port + 1)
    caps = read_lane_caps(fabric, runner=fake)
    assert (caps.ports_read, caps.ports_failed) == (38 - 7, 7)
    assert caps.data_vls == 8 and caps.mtu == 2048
    lines = [w for w in caps.warnings if "failed" in w or "PortInfo of" in w]
    assert lines == [
        *(
            f"PortInfo of 0x{t.node_guid:016x}[{t.port}] (lid {t.lid}): smpquery exited 255: "
            "iberror: x"
            for t in bad[:3]
        ),
        "PortInfo: 4 more ports failed",
    ]
    assert caps.describe().endswith("(31 ports read, 7 failed, 4 warnings)")


def test_unparsable_answer_and_os_error_are_failures(fabric):
    fake = Fake(fabric)
    a, b = sampled(fabric)[:2]
    fake.texts[(a.lid, a.port)] = stdout("bad-port")
    fake.fail[(b.lid, b.port)] = FileNotFoundError(2, "No such file or directory")
    caps = read_lane_caps(fabric, runner=fake)
    assert caps.ports_failed == 2
    assert caps.warnings[0] == (
        f"PortInfo of 0x{a.node_guid:016x}[{a.port}] (lid {a.lid}): smpquery portinfo "
        f"{a.lid} {a.port}: not a PortInfo reply: 'smpquery: iberror: failed: operation "
        "portinfo: port info query failed'"
    )
    assert "No such file or directory" in caps.warnings[1]


def test_a_port_without_link_is_left_out_of_the_mtu(fabric):
    fake = Fake(fabric)
    sw = sampled(fabric)[0]
    fake.texts[(sw.lid, sw.port)] = answer(sw.lid, sw.port, "switch-port-down", NeighborMTU="256")
    caps = read_lane_caps(fabric, runner=fake)
    assert caps.mtu == 2048 and caps.data_vls == 8 and caps.ports_read == 38
    assert caps.warnings == (
        f"PortInfo: 1 of 38 ports read have no link, e.g. 0x{sw.node_guid:016x}[{sw.port}] "
        "(Down): left out of the MTU",
    )


def test_no_port_with_a_link_gives_mtu_zero(fabric):
    fake = Fake(fabric)
    for t in sampled(fabric, 0):
        fake.texts[(t.lid, t.port)] = answer(t.lid, t.port, "switch-port-down")
    caps = read_lane_caps(fabric, runner=fake, sample_cas=0)
    assert caps.mtu == 0 and caps.data_vls == 8
    assert caps.warnings[-1] == "PortInfo: no port read has a link: MTU unknown (0)"


def test_all_failed_names_the_first_failure(fabric):
    def runner(argv):
        raise PortInfoError(f"smpquery exited 255: ibpanic: lid {argv[2]}: sim_init: connect")

    first = sampled(fabric)[0]
    with pytest.raises(PortInfoError) as err:
        read_lane_caps(fabric, runner=runner)
    assert str(err.value) == (
        f"PortInfo: none of 38 ports answered; first failure: PortInfo of "
        f"0x{first.node_guid:016x}[{first.port}] (lid {first.lid}): smpquery exited 255: "
        f"ibpanic: lid {first.lid}: sim_init: connect"
    )
    assert err.value.category == "portinfo"


def test_workers_bound_the_processes_at_once(fabric):
    fake = Fake(fabric, delay_s=0.02)
    read_lane_caps(fabric, runner=fake, workers=5)
    assert fake.most == 5
    fake = Fake(fabric, delay_s=0.01)
    read_lane_caps(fabric, runner=fake, workers=1)
    assert fake.most == 1


@pytest.mark.parametrize("workers", [0, 7])
def test_workers_stay_within_what_ibsim_takes(fabric, workers):
    with pytest.raises(ValueError, match="workers must be 1 to 6"):
        read_lane_caps(fabric, runner=Fake(fabric), workers=workers)


def test_a_fabric_without_lids_has_nothing_to_read():
    text = re.sub(r" lid \d+", "", SMALL.read_text())
    fabric = fabric_from_text(text, "nolids")
    with pytest.raises(PortInfoError, match="no port with a LID to read PortInfo from"):
        read_lane_caps(fabric, runner=Fake(fabric))


def test_lane_caps_describe_is_one_line():
    caps = LaneCaps(4, 8, 2, 4096, 10, 1, ("a", "b"))
    assert caps.describe() == (
        "lanes: 4 data VLs, VLArb low 8 / high 2 entries, MTU 4096 bytes "
        "(10 ports read, 1 failed, 2 warnings)"
    )


def test_port_record_helpers():
    p = PortVLInfo(0xABC, 3, 7, 8, 0, 8, 8, 4096, 2048, None)
    assert p.name == "0x0000000000000abc[3]" and p.data_vls == 8 and p.has_link


# -- the subprocess runner, with a fake smpquery -------------------------------------
FAKE = """\
import json, os, re, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_SMP_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
assert args[0] == "-t", args
case = os.path.join(os.environ["FAKE_SMP_DATA"], os.environ["FAKE_SMP_CASE"])
if os.environ["FAKE_SMP_CASE"] == "sleep":
    time.sleep(30)
text = open(os.path.join(case, "stdout.txt")).read()
# answer for the port asked, as smpquery would
sys.stdout.write(re.sub(r"Lid \\d+ port \\d+", f"Lid {args[-2]} port {args[-1]}", text, count=1))
sys.stderr.write(open(os.path.join(case, "stderr.txt")).read())
sys.exit(int(open(os.path.join(case, "returncode.txt")).read()))
"""


@pytest.fixture
def fake_smpquery(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "smpquery"
    exe.write_text(f"#!{sys.executable}\n{FAKE}")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.jsonl"

    def env(name):
        return {
            **os.environ,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_SMP_DATA": str(SMP),
            "FAKE_SMP_CASE": name,
            "FAKE_SMP_LOG": str(log),
        }

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()]

    return env, calls, exe


def test_runner_returns_stdout_and_bounds_the_mad_wait(fake_smpquery, tmp_path):
    env, calls, exe = fake_smpquery
    run = SmpqueryRunner(5.0, env=env("leaf-down"), cwd=tmp_path)
    assert run.binary == str(exe)
    assert run(["smpquery", "portinfo", "3", "1"]) == stdout("leaf-down")
    assert calls() == [["-t", "1000", "portinfo", "3", "1"]]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "bad-port",
            "smpquery exited 255: smpquery: iberror: failed: operation portinfo: "
            "port info query failed",
        ),
        (
            "bad-lid",
            "smpquery exited 255: ibwarn: [6599] mad_rpc: _do_madrpc failed; dport (Lid 999)",
        ),
    ],
)
def test_runner_failure_is_smpquerys_last_word(fake_smpquery, name, message):
    env, _, _ = fake_smpquery
    with pytest.raises(PortInfoError) as err:
        SmpqueryRunner(env=env(name))(case(name)["argv"])
    assert str(err.value) == message


def test_runner_kills_what_does_not_end(fake_smpquery):
    env, calls, _ = fake_smpquery
    run = SmpqueryRunner(1.0, env=env("sleep"))
    t0 = time.monotonic()
    with pytest.raises(PortInfoError, match=r"^smpquery timed out after 1 s$"):
        run(["smpquery", "portinfo", "3", "1"])
    assert time.monotonic() - t0 < 5
    assert calls() == [["-t", "200", "portinfo", "3", "1"]]


def test_missing_smpquery_is_said_at_once(tmp_path):
    with pytest.raises(PortInfoError, match="smpquery not found on PATH"):
        SmpqueryRunner(env={"PATH": str(tmp_path)})
    with pytest.raises(ValueError, match="timeout_s"):
        SmpqueryRunner(0)


def test_read_lane_caps_uses_the_subprocess_runner_by_default(fake_smpquery, monkeypatch):
    env, calls, _ = fake_smpquery
    for key, value in env("leaf-down").items():
        monkeypatch.setenv(key, value)
    fabric = fabric_from_file(SMALL)
    caps = read_lane_caps(fabric, sample_cas=0, timeout_s=2.5)
    assert (caps.ports_read, caps.ports_failed, caps.data_vls, caps.mtu) == (6, 0, 8, 2048)
    want = [["-t", "500", "portinfo", str(t.lid), str(t.port)] for t in sampled(fabric, 0)]
    assert sorted(calls()) == sorted(want)


def test_timeout_must_be_positive(fabric):
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        read_lane_caps(fabric, runner=Fake(fabric), timeout_s=0)
