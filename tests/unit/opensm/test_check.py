"""Tests for ibqos.opensm.check: every trap of docs/design.md §6.1-6.2 gets a case, and everything
ibqos renders passes the checker."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibqos.config.lanes import LaneConfig
from ibqos.lab.opensm import MINIMAL_POLICY, OpenSMFiles
from ibqos.lab.opensm import render_conf as lab_conf
from ibqos.opensm.check import Finding, check_conf, check_file, check_policy, detect_kind
from ibqos.opensm.conf import managed_values, render_conf
from ibqos.opensm.policy import PolicyJob, render_policy
from ibqos.plan.planner import JobState, Tables, plan
from tests.support.paths import TESTS

DATA = TESTS / "data" / "opensm"
D = MINIMAL_POLICY  # a DEFAULT level, lines 2-7


def group(*lines: str, name: str = "g") -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"port-groups\n  port-group\n    name: {name}\n{body}  end-port-group\nend-port-groups\n"


def rule(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"qos-match-rules\n  qos-match-rule\n{body}  end-qos-match-rule\nend-qos-match-rules\n"


def level(name: str, sl: str, *lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    head = f"qos-levels\n  qos-level\n    name: {name}\n    sl: {sl}\n"
    return f"{head}{body}  end-qos-level\nend-qos-levels\n"


# (case, policy text, severity, line, a piece of the message)
POLICY_TRAPS = [
    # A.1 lexer 1: unquoted whitespace is dropped outside use:
    ("blank in a name", group("port-guid: 0x1", name="Job A") + D, "warning", 3, "as 'JobA'"),
    (
        "the quoted reference does not match",
        group("port-guid: 0x1", name="Job A") + D
        + rule('destination: "Job A"', "qos-level-name: DEFAULT"),
        "error", 15, "'Job A' is not defined",
    ),
    ("blank in a port-name", group("port-name: node04 HCA-1/P1") + D, "error", 4,
     "'node04HCA-1/P1'"),
    # A.1 lexer 2: bare keywords fire inside names
    ("keyword in a name", group("port-guid: 0x1", name="job-port-groups-1") + D, "error", 3,
     "keyword 'port-groups'"),
    ("end- keyword in a name", D + level("x-end-qos-level", "1"), "error", 10,
     "runs into the keyword 'end-qos-level'"),
    ("keyword as a name", group(name="qos-levels") + D, "error", 3, "keyword 'qos-levels'"),
    ("a qos-ulps keyword across two names",  # 'any, pkey' is read as one token
     D + group("port-guid: 0x1", name="company") + rule("source: company, pkeyring",
     "qos-level-name: DEFAULT"), "error", 16, "keyword 'any, pkey'"),
    # A.1 lexer 3: a last comment needs its newline
    ("last comment without newline", D + "# the end", "error", 8, "needs a newline"),
    # A.1 lexer 4: numbers are strtoull(..., 0)
    ("octal SL", D + level("x", "010"), "error", 11, "octal (8)"),
    # qos-level sl is not range-checked (it is cast to uint8)
    ("SL above 15", D + level("x", "20"), "error", 9, "sl 20 is not 0-15"),
    # validation: AC10 .. AC13
    ("no DEFAULT", level("other", "0"), "error", 1, "ERR AC10"),
    ("empty file", "", "error", 1, "ERR AC10"),
    ("undefined level", D + rule("qos-level-name: nope"), "error", 9, "ERR AC11"),
    ("undefined source", D + rule("source: nope", "qos-level-name: DEFAULT"), "error", 9,
     "ERR AC12"),
    ("undefined destination", D + rule("destination: nope", "qos-level-name: DEFAULT"), "error",
     9, "ERR AC13"),
    # grammar: sections, blocks and the parser's own checks
    ("missing end-port-group",
     "port-groups\n  port-group\n    name: a\n  port-group\n    name: b\n  end-port-group\n"
     "end-port-groups\n" + D, "error", 4, "expected a port-group entry"),
    ("empty port-groups", "port-groups\nend-port-groups\n" + D, "error", 2, "needs one at least"),
    ("empty qos-ulps", "qos-ulps\nend-qos-ulps\n" + D, "error", 2, "qos-ulps line"),
    ("CRLF line ends", D.replace("\n", "\r\n"), "error", 2, "CRLF"),
    ("group without a name", "port-groups\n  port-group\n    use: x\n  end-port-group\n"
     "end-port-groups\n" + D, "error", 4, "no port group name"),
    ("two names", group("name: h") + D, "error", 5, "multiple 'name' tags"),
    ("level without sl", "qos-levels\n  qos-level\n    name: DEFAULT\n  end-qos-level\n"
     "end-qos-levels\n", "error", 4, "no 'sl' specified"),
    ("rule without level", D + rule("source: g"), "error", 11, "no 'qos-level-name'"),
    ("mtu-limit out of range", D + level("x", "1", "mtu-limit: 6"), "error", 12, "mtu limit"),
    ("rate-limit out of range", D + level("x", "1", "rate-limit: 1"), "error", 12, "rate limit"),
    ("port-name without /P", group('port-name: "node04 HCA-1"') + D, "error", 5,
     "illegal port name"),
    ("port-name port 0", group('port-name: "node04 HCA-1/P0"') + D, "error", 5,
     "illegal port number"),
    ("a value on the next line", group("port-guid: 0x1", name="a\nb") + D, "error", 4,
     "is read as part of the name value on line 3"),
    ("a number after name: on its line", "qos-levels\n  qos-level\n    name: x sl: 3\n"
     "  end-qos-level\nend-qos-levels\n" + D, "error", 3, "one entry per line"),
    ("qos-ulps SL above 15", "qos-ulps\n  default : 16\nend-qos-ulps\n", "error", 2,
     "illegal SL value"),
    ("sl2vl-table of 15 VLs",
     D + "qos-setup\n  sl2vl-tables\n    sl2vl-scope\n      group: g\n"
     "      sl2vl-table: 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14\n    end-sl2vl-scope\n"
     "  end-sl2vl-tables\nend-qos-setup\n", "error", 13, "should be 16"),
    # accepted, but not what was meant
    ("qos-setup is ignored",
     D + "qos-setup\n  vlarb-tables\n    vlarb-scope\n      group: g\n      vlarb-low: 0:64\n"
     "    end-vlarb-scope\n  end-vlarb-tables\nend-qos-setup\n", "warning", 8, "ignored"),
    ("a huge GUID range", group("port-guid: 0x0-0xFFFFFFFFFFFFFFFF") + D, "error", 4,
     "stalls it"),  # it hung OpenSM 3.3.23 in the lab
    ("a wide GUID range", group("port-guid: 0x0-0x1FFFFF") + D, "warning", 4, "one GUID at a time"),
    ("a second DEFAULT", D + D, "warning", 10, "defined again (first on line 3)"),
    ("a catch-all rule first",
     D + "qos-match-rules\n  qos-match-rule\n    qos-level-name: DEFAULT\n"
     "  end-qos-match-rule\n  qos-match-rule\n    source: g\n    qos-level-name: DEFAULT\n"
     "  end-qos-match-rule\nend-qos-match-rules\n" + group("port-guid: 0x1"),
     "warning", 9, "no rule after it"),
    ("ipoib needs a partition", "qos-ulps\n  default : 0\n  ipoib : 1\nend-qos-ulps\n",
     "warning", 3, "unless a partition has P_Key 0x7fff with 2 full members"),
    ("path-bits unused", D + level("x", "1", "path-bits: 1"), "warning", 9, "never used"),
    ("rate-limit of newer OpenSM", D + level("x", "1", "rate-limit: 24"), "error", 12,
     "rate limit is out of range"),  # 3.3.23 stops at 22 [verified]
    ("a group without members", group() + D, "warning", 2, "matches no port"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "severity", "line", "message"),
    [case[1:] for case in POLICY_TRAPS],
    ids=[case[0] for case in POLICY_TRAPS],
)
def test_policy_traps(text: str, severity: str, line: int | None, message: str) -> None:
    findings = check_policy(text, "qos-policy.conf")
    hits = [f for f in findings if message in f.message]
    assert hits, findings
    assert (hits[0].severity, hits[0].line) == (severity, line), hits[0]


def test_a_syntax_error_stops_the_check_as_it_stops_opensm() -> None:
    text = group(name="my-port-group") + level("x", "1")  # also no DEFAULT
    (finding,) = check_policy(text, "p")
    assert finding.line == 3 and "drops the whole policy (ERR AC05, AC03)" in finding.message


@pytest.mark.parametrize(
    "text",
    [
        D,
        "qos-ulps\n  default : 0\nend-qos-ulps\n",  # the shortest legal files (docs/design.md §6.1)
        (DATA / "reference-example.conf").read_text(),
        (DATA / "golden" / "qos-policy.conf").read_text(),
        D
        + group("port-guid: 0x1-0x3, 0x10", "pkey: 0x7fff", name='"Job A"')
        + rule('source: "Job A"', 'destination: "Job A", g', "qos-level-name: default")
        + group("node-type: CA, self", name="g"),  # later sections, a duplicate group name
    ],
)
def test_good_policies_have_no_errors(text: str) -> None:
    assert [f for f in check_policy(text, "p") if f.severity == "error"] == []


# -- opensm.conf ----------------------------------------------------------------------------

Q = "qos TRUE\n"
SL2VL = "0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
CAPS = {"data_vls": 8, "vlarb_low_cap": 8, "vlarb_high_cap": 8}

# (case, opensm.conf text, severity, line, a piece of the message)
CONF_TRAPS = [
    # OpenSM skips a line it has no option for and reads the rest (osm_subn_parse_conf_file)
    ("key=value", "qos=TRUE\n", "warning", 1, "'key=value' is not opensm.conf syntax"),
    ("qos_sw0_max_vls=2 (man page)", Q + "qos_sw0_max_vls=2\n", "warning", 2, "Unrecognized"),
    ("qos true", "qos true\n", "error", 1, "exactly TRUE"),
    ("qos FALSE", "qos FALSE\n", "warning", 1, "QoS is off"),
    ("no qos line", "routing_engine ftree\n", "warning", 1, "no 'qos' line"),
    ("unknown qos key", Q + "qos_ca_vlarb_lo 0:64\n", "warning", 2, "unknown option"),
    ("a long line", Q + "log_file /" + "x" * 1030 + "\n", "error", 2, "longer than 1022"),
    ("set twice", Q + "qos TRUE\n", "warning", 2, "OpenSM uses this last one"),
    # SL2VL (osm_qos.c parse_sl2vl_entry; subn_verify_sl2vl only warns)
    ("sl2vl of 3 VLs", Q + "qos_ca_sl2vl 0,1,2\n", "error", 2, "missing SLs to VL 0"),
    ("sl2vl of 10 VLs", Q + "qos_ca_sl2vl 0,1,2,3,4,5,6,7,0,1\n", "error", 2,
     "qos_ca_sl2vl: 10 VLs given, 16 needed"),
    ("sl2vl of 10 VLs and a comma", Q + "qos_sw0_sl2vl 0,1,2,3,4,5,6,7,0,1,\n", "error", 2,
     "qos_sw0_sl2vl: 10 VLs given, 16 needed"),
    ("sl2vl with an empty VL", Q + "qos_ca_sl2vl 0,,2\n", "error", 2, "VL 2 is empty"),
    ("sl2vl of 17 VLs", Q + f"qos_ca_sl2vl {SL2VL},0\n", "error", 2, "17 VLs given, 16"),
    ("sl2vl beyond the data VLs", Q + "qos_swe_sl2vl 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,7\n",
     "error", 2, "SL 8 VL 8 -> 0"),
    ("sl2vl VL 16", Q + f"qos_swe_sl2vl {SL2VL[:-1]}16\n", "error", 2, "VLs are 0-15"),
    ("sl2vl VL 15 drops", Q + f"qos_swe_sl2vl {SL2VL[:-1]}15\n", "warning", 2, "VL 15"),
    ("sl2vl octal", Q + f"qos_swe_sl2vl 0,1,2,3,4,5,6,07,010,{SL2VL[18:]}\n", "error", 2,
     "reads VL 8 for SL 8 where '010'"),  # then masked to VL 0 [verified with smpquery]
    ("sl2vl blank before a comma", Q + f"qos_swe_sl2vl 0 ,{SL2VL[2:]}\n", "error", 2,
     "reads VL 0 for SL 1"),
    ("sl2vl not numbers", Q + "qos_swe_sl2vl 0-7\n", "error", 2, "is not a VL number"),
    ("sl2vl empty", Q + "qos_swe_sl2vl\n", "error", 2, "every SL to VL 0"),
    # VLArb (osm_qos.c parse_vlarb_entry; subn_verify_vlarb only warns)
    ("vlarb VL 15", Q + "qos_swe_vlarb_low 0:64,15:32\n", "error", 2, "programs VL 0"),
    ("vlarb VL 16", Q + "qos_swe_vlarb_low 16:32\n", "error", 2, "programs VL 1"),
    ("vlarb beyond the data VLs", Q + "qos_ca_vlarb_low 9:32\n", "error", 2, "masks it to VL 1"),
    ("vlarb weight 256", Q + "qos_swe_vlarb_high 0:256\n", "error", 2, "OpenSM keeps 0"),
    ("vlarb beyond the cap", Q + "qos_swe_vlarb_low " + ",".join(["1:1"] * 9) + "\n", "error",
     2, "VLArbLowCap is 8"),
    ("vlarb beyond 64", Q + "qos_swe_vlarb_high " + ",".join(["1:0"] * 65) + "\n", "error", 2,
     "first 64"),
    ("vlarb blank before ':'", Q + "qos_swe_vlarb_low 0 :64,1:32\n", "error", 2,
     "reads entry 1 as 0:0"),
    ("vlarb not vl:weight", Q + "qos_swe_vlarb_low 0-64\n", "error", 2, "is not vl:weight"),
    ("vlarb all zero", Q + "qos_swe_vlarb_low 0:0\n", "warning", 2, "every weight is 0"),
    ("vlarb empty", Q + "qos_swe_vlarb_high\n", "warning", 2, "write 0:0"),
    # VLHighLimit (subn_verify_high_limit)
    ("high_limit 256", Q + "qos_ca_high_limit 256\n", "error", 2, "expected 0-255"),
    ("high_limit text", Q + "qos_ca_high_limit four\n", "error", 2, "is not a number"),
    ("high_limit -2", Q + "qos_ca_high_limit -2\n", "warning", 2, "means unset"),
    # routing engines that own SLs (docs/design.md §6.4)
    ("lash owns SL2VL", Q + "routing_engine lash,minhop\n" + f"qos_sl2vl {SL2VL}\n", "warning",
     3, "routing engine lash"),
    ("a damaged ibqos block", Q + "# BEGIN ibqos managed keys\nqos_ca_high_limit 1\n",
     "warning", 2, "no end marker"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "severity", "line", "message"),
    [case[1:] for case in CONF_TRAPS],
    ids=[case[0] for case in CONF_TRAPS],
)
def test_conf_traps(text: str, severity: str, line: int | None, message: str) -> None:
    findings = check_conf(text, "opensm.conf", **CAPS)
    hits = [f for f in findings if message in f.message]
    assert hits, findings
    assert (hits[0].severity, hits[0].line) == (severity, line), hits[0]


def test_conf_checks_without_the_fabric_limits() -> None:
    text = Q + "qos_ca_sl2vl 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,7\n"
    text += "qos_ca_vlarb_low " + ",".join(f"{i % 8}:1" for i in range(20)) + "\n"
    assert check_conf(text, "c") == []  # VLs 8-14 and 20 entries are fine without limits
    assert {f.line for f in check_conf(text, "c", **CAPS)} == {2, 3}


def test_conf_good_spellings() -> None:
    text = (
        "qos TRUE\n"
        "qos_swe_vlarb_low 0: 64, 1: 0x20, 2:32\n"  # blanks after ':' and ',' read fine
        f'qos_ca_sl2vl "{SL2VL}"\n'  # one pair of quotes is removed
        "qos_ca_high_limit -1\n"  # unset
        "qos_rtr_sl2vl (null)\n"  # unset
        "qos_swe_vlarb_high 0:0\n"
    )
    assert check_conf(text, "c", **CAPS) == []


def test_the_lab_files_pass() -> None:
    conf = lab_conf(OpenSMFiles(Path("/lab/opensm")), {}, "a lab")
    assert check_conf(conf, "lab") == []
    assert check_policy(MINIMAL_POLICY, "lab") == []


def test_the_verified_example_of_reference_a2() -> None:
    """What worked in ibsim: SL 15 to VL 15 is a warning; qos_ca_sl2vl lists VLs 8-14,
    which OpenSM masked on 8-VL ports."""
    text = (DATA / "reference-a2-opensm.conf").read_text()
    assert [(f.line, f.severity) for f in check_conf(text, "c")] == [(6, "warning")]
    errors = [f for f in check_conf(text, "c", **CAPS) if f.severity == "error"]
    assert [(f.line, f.message.split(":")[0]) for f in errors] == [(7, "qos_ca_sl2vl")]


def test_finding_str() -> None:
    assert str(Finding("a.conf", 3, "bad", "warning")) == "a.conf:3: bad"
    assert str(Finding("a.conf", None, "no DEFAULT")) == "a.conf: no DEFAULT"


# -- files ----------------------------------------------------------------------------------


def test_check_file_picks_the_kind(tmp_path: Path) -> None:
    policy = tmp_path / "site.rules"
    policy.write_text(group(name="a-port-group-b") + D)
    conf = tmp_path / "site.options"
    conf.write_text("qos=TRUE\n")
    assert detect_kind(policy, policy.read_text()) == "policy"
    assert detect_kind(conf, conf.read_text()) == "conf"
    assert detect_kind("/etc/opensm/qos-policy.conf", "") == "policy"
    assert detect_kind("/etc/opensm/opensm.conf", "qos-levels\n") == "conf"
    (found,) = check_file(policy)
    assert str(found).startswith(f"{policy}:3: syntax error")
    assert "key=value" in str(check_file(conf)[0])  # OpenSM skips it: a warning
    assert check_file(conf, kind="policy")[0].message.startswith("syntax error")
    (missing,) = check_file(tmp_path / "nope.conf")
    assert str(missing) == f"{tmp_path / 'nope.conf'}: cannot read: No such file or directory"


def test_check_file_passes_the_fabric_limits(tmp_path: Path) -> None:
    conf = tmp_path / "opensm.conf"
    conf.write_text(Q + "qos_ca_vlarb_low 9:1\n")
    assert check_file(conf) == []
    assert len(check_file(conf, data_vls=8)) == 1


# -- everything ibqos renders passes --------------------------------------------------------

_ENTRY = st.tuples(st.integers(0, 7), st.integers(0, 255))


@st.composite
def _tables(draw: st.DrawFn) -> Tables:
    low = draw(st.lists(_ENTRY, min_size=1, max_size=8).filter(lambda e: any(w for _, w in e)))
    return Tables(
        sl_to_vl=tuple(draw(st.lists(st.integers(0, 7), min_size=16, max_size=16))),
        vlarb_low=tuple(low),
        vlarb_high=tuple(draw(st.lists(_ENTRY, max_size=8))),
        high_limit=draw(st.integers(0, 255)),
        lanes=(),
        cost=0.0,
        target_ratio=1.0,
        achieved_ratio=1.0,
        weight_error=0.0,
    )


_ADMIN_CONF = st.lists(
    st.sampled_from(
        [
            "# comment",
            "routing_engine ftree",
            "qos FALSE",
            "qos_max_vls 8",
            "qos_ca_sl2vl 0,1",
            "qos_swe_vlarb_low 15:300",
            "  qos_ca_high_limit 999",
            "qos_sl2vl " + SL2VL,
            "log_flags 0x03\r",
            "",
        ]
    ),
    max_size=8,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(
    tables=st.one_of(st.none(), _tables()),
    admin=_ADMIN_CONF,
    types=st.lists(st.sampled_from(["ca", "swe", "sw2sw", "sw0", "rtr"]), min_size=1, unique=True),
)
def test_rendered_conf_passes(tables: Tables | None, admin: str, types: list[str]) -> None:
    values = managed_values(tables, types)
    out = render_conf(admin, values)
    managed = set(values)
    errors = [f for f in check_conf(out, "c", **CAPS) if f.severity == "error"]
    # what is left of the admin's bad lines is the admin's; ibqos's lines are all good
    assert all(f.message.split(":")[0] not in managed for f in errors), errors
    if tables is not None and set(types) >= {"ca", "swe", "sw0", "rtr"}:
        assert not [f for f in errors if f.message.startswith("qos_")], errors


_CLASSES = st.sampled_from(["low", "moderate", "high"])


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(st.tuples(_CLASSES, st.floats(0, 1)), min_size=0, max_size=20),
    reserved=st.lists(st.integers(0, 15), max_size=3, unique=True),
)
def test_planned_files_pass(jobs: list[tuple[str, float]], reserved: list[int]) -> None:
    """Plans for random job mixes render into files the checker passes without a finding."""
    cfg = LaneConfig(data_vls=8, vlarb_low_cap=8, vlarb_high_cap=8, reserved_sls=tuple(reserved))
    states = [
        JobState(f"{i}", intensity=x, expected=c)  # type: ignore[arg-type]
        for i, (c, x) in enumerate(jobs)
    ]
    result = plan(states, cfg, None, 0.0)
    conf = render_conf("", managed_values(result.plan.tables, ("ca", "swe", "sw0", "rtr")))
    assert check_conf(conf, "c", **CAPS) == []
    policy = render_policy(
        None,
        [PolicyJob(j, sl, (0x1000 + i,)) for i, (j, sl) in enumerate(result.plan.job_sl.items())],
    )
    assert check_policy(policy, "p") == []
