"""The traps that made OpenSM and ibqos disagree: partitions (ipoib lines, P_Keys in match
rules), over-long values, damaged ibqos markers, and what ``render_checked`` does when the
admin's own line is the problem.

The OpenSM verdicts in the comments were measured with OpenSM 3.3.23 in an ibsim lab
(``tests/integration/test_policy_traps_lab.py`` runs them again).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.config.lanes import LaneConfig
from ibqos.config.models import OpenSMConfig
from ibqos.errors import RenderError
from ibqos.lab.opensm import MINIMAL_POLICY
from ibqos.opensm.check import check_conf, check_file, check_policy, partitions_file
from ibqos.opensm.conf import BEGIN_MARK as CONF_BEGIN
from ibqos.opensm.conf import END_MARK as CONF_END
from ibqos.opensm.conf import find_block, render_conf
from ibqos.opensm.partitions import (
    DEFAULT_PARTITIONS_FILE,
    Partitions,
    parse_partitions,
    read_partitions,
)
from ibqos.opensm.policy.render import BEGIN_MARK, END_MARK, PolicyJob, render_policy
from ibqos.opensm.render import render_checked, render_files
from ibqos.plan.planner import JobState, plan

D = MINIMAL_POLICY  # lines 1-7
NO_FILE = Partitions.without_file()
P123 = parse_partitions("P1=0x0123 : ALL=full ;\n", "partitions.conf")
P123_ONE = parse_partitions("Default=0x7fff : ALL=full ;\nP1=0x0123 : SELF=full ;\n", "pc")


def ulps(*lines: str) -> str:
    return "qos-ulps\n" + "".join(f"  {line}\n" for line in lines) + "end-qos-ulps\n"


def rule(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"qos-match-rules\n  qos-match-rule\n{body}  end-qos-match-rule\nend-qos-match-rules\n"


def group(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"port-groups\n  port-group\n    name: g\n{body}  end-port-group\nend-port-groups\n"


# -- partitions.conf ------------------------------------------------------------------------


def test_partitions_as_opensm_builds_them() -> None:
    text = (
        "# site partitions\n"
        "Default=0x7fff, ipoib : ALL=full ;\n"
        "storage=0x8002, defmember=full : 0x1, 0x2, SELF=limited ;\n"
        "compute : 0x3=full, 0x4 ;  # no P_Key: OpenSM gives it the next free one\n"
        "empty=0x0005 : ;\n"
        "mc=0x6 : ALL_CAS=full, mgid=ff12:401b::1, rate=3 ;\n"
    )
    parts = parse_partitions(text, "pc")
    assert parts is not None
    assert sorted(parts.full) == [1, 2, 6, 0x7FFF]  # "compute" got 1; "empty" was removed
    assert parts.full_members(0x7FFF) is None  # ALL: depends on the fabric
    assert parts.full_members(0x8002) == 2  # bit 15 ignored; SELF is limited there
    assert parts.full_members(1) == 1
    assert parts.full_members(6) is None
    assert not parts.has(5) and parts.names == {"Default", "storage", "compute", "mc"}


def test_without_a_partition_file_only_default_with_every_port_full(tmp_path: Path) -> None:
    missing = read_partitions(tmp_path / "partitions.conf")
    assert missing is not None and dict(missing.full) == {0x7FFF: None}
    # with a file, Default has only the SM port as a full member unless the file says more
    parts = parse_partitions("P1=0x0123 : ALL=full ;\n", "pc")
    assert parts is not None and parts.full_members(0x7FFF) == 1
    assert parse_partitions("P1=0x0123 ALL=full ;\n", "pc") is None  # no ':': unknown


# -- ipoib and P_Keys -----------------------------------------------------------------------

# (case, the admin's addition, partitions, severity or None, line, a piece of the message)
PKEY_TRAPS = [
    # OpenSM: ERR AC05 "IPoIB partition, pkey 0x0123 - partition doesn't exist", AC03;
    # the whole policy dropped
    ("ipoib pkey, no partition", ulps("ipoib, pkey 0x0123 : 4"), NO_FILE, "error", 9,
     "'IPoIB partition, pkey 0x0123 - partition doesn't exist'"),
    # OpenSM: AC05 "... partition has less than two full members", AC03; policy dropped
    ("ipoib pkey, one full member", ulps("ipoib, pkey 0x0123 : 4"), P123_ONE, "error", 9,
     "less than two full members"),
    # OpenSM: kept, no ERR
    ("ipoib pkey, full members", ulps("ipoib, pkey 0x0123 : 4"), P123, None, 0, ""),
    ("ipoib pkey with bit 15", ulps("ipoib, pkey 0x8123 : 4"), P123, None, 0, ""),
    ("ipoib, no partitions.conf", ulps("ipoib : 4"), NO_FILE, None, 0, ""),
    # OpenSM: AC05 "IPoIB partition, pkey 0x7FFF - partition has less than two full
    # members", AC03: with a partition file, Default's only full member is the SM port
    ("ipoib, Default left alone", ulps("ipoib : 4"), P123, "error", 9, "0x7FFF"),
    # partitions unknown: OpenSM may drop the policy, the checker cannot tell
    ("ipoib pkey, partitions unknown", ulps("ipoib, pkey 0x0123 : 4"), None, "warning", 9,
     "the partitions are not known here"),
    # OpenSM: ERR AC14 "pkey 0x0123 in match rule - partition doesn't exist"; rule and
    # policy kept
    ("pkey in a match rule", rule("pkey: 0x0123", "qos-level-name: DEFAULT"), NO_FILE,
     "warning", 9, "ERR AC14"),
    ("pkey range in a match rule", rule("pkey: 0x8001-0x8009", "qos-level-name: DEFAULT"),
     NO_FILE, "warning", 9, "0x0001, 0x0002, 0x0003 and 6 more"),
    ("pkey in a match rule, defined", rule("pkey: 0x0123", "qos-level-name: DEFAULT"), P123,
     None, 0, ""),
    ("default pkey in a match rule", rule("pkey: 0x7fff", "qos-level-name: DEFAULT"), None,
     None, 0, ""),
    # OpenSM: the same AC14, the rule kept
    ("any, pkey", ulps("any, pkey 0x0123 : 4"), NO_FILE, "warning", 9, "ERR AC14"),
    # OpenSM: nothing logged, the group silently has no port from it
    ("unknown partition in a group", group("partition: default"), NO_FILE, "warning", 9,
     "no partition named 'default'"),
    ("unknown pkey in a group", group("pkey: 0x0123"), NO_FILE, "warning", 9,
     "no partition has P_Key 0x0123"),
    ("known partition in a group", group("partition: P1"), P123, None, 0, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "partitions", "severity", "line", "message"),
    [case[1:] for case in PKEY_TRAPS],
    ids=[case[0] for case in PKEY_TRAPS],
)
def test_pkey_traps(
    text: str, partitions: Partitions | None, severity: str | None, line: int, message: str
) -> None:
    findings = check_policy(D + text, "qos-policy.conf", partitions=partitions)
    if severity is None:
        assert findings == []
        return
    (finding,) = findings
    assert (finding.severity, finding.line) == (severity, line)
    assert message in finding.message


def test_an_ipoib_error_stops_the_check_as_it_stops_opensm() -> None:
    # OpenSM stops parsing at the ipoib line: it never gets to validate the rule after it
    text = D + ulps("ipoib, pkey 0x0123 : 4") + rule("qos-level-name: nope")
    (finding,) = check_policy(text, "p", partitions=NO_FILE)
    assert "AC05" in finding.message


# -- values and bytes OpenSM cannot take ----------------------------------------------------


def test_a_value_of_10_KiB_overruns_opensms_buffer() -> None:
    # OpenSM 3.3.23 died in the heavy sweep that parsed a 12 KiB use: text
    long = D + rule("use: " + "x" * 10240, "qos-level-name: DEFAULT")
    errors = [f for f in check_policy(long, "p") if f.severity == "error"]
    assert [(f.line, "10240 bytes" in f.message) for f in errors] == [(10, True)]
    ok = D + rule("use: " + "x" * 10239, "qos-level-name: DEFAULT")
    assert [f for f in check_policy(ok, "p") if f.severity == "error"] == []


def test_a_byte_order_mark() -> None:
    # OpenSM: ERR AC05 "Syntax error (line 1:2)", AC03; policy dropped
    (finding,) = check_policy("\ufeff" + D, "p")
    assert finding.line == 1 and "byte order mark" in finding.message


@pytest.mark.parametrize(
    "text",
    [
        D + 'port-groups\n  port-group\n    name: "a\nb"\n  end-port-group\nend-port-groups\n',
        D.replace("\n", "\r\n"),
        D + "qos-levels\n  qos-level\n    name: x\r\n    sl: 1\n  end-qos-level\nend-qos-levels\n",
        "port-groups\n  port-group\n    name: a\nb\n",
        "",
    ],
)
def test_every_finding_is_one_line_naming_file_and_line(text: str) -> None:
    findings = check_policy(text, "p") + check_conf(text.replace("port-groups", "qos x"), "c")
    assert findings
    for finding in findings:
        assert finding.line is not None and str(finding).startswith(
            f"{finding.source}:{finding.line}: "
        )
        assert "\n" not in str(finding) and "\r" not in str(finding)


# -- ibqos's markers ------------------------------------------------------------------------

JOBS = [PolicyJob("1", 3, (0x10,)), PolicyJob("2", 4, (0x20,))]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# (damage, the line reported from the good block's (begin, end) lines, message)
MARKER_DAMAGE = [
    # the fault seen on a lab: the begin marker deleted by hand, the end marker kept
    (lambda t: t.replace(_begin_line(t), ""), lambda b, e: e - 1,
     "end marker ('# END ibqos managed block') without its begin marker"),
    (lambda t: t.replace(END_MARK + "\n", ""), lambda b, e: b, "has no end marker"),
    (lambda t: t + t[t.index(BEGIN_MARK):], lambda b, e: e + 1,
     "a second ibqos block (the first is on lines 8-"),
    (lambda t: t.replace(END_MARK, BEGIN_MARK), lambda b, e: e, "a second begin marker inside"),
    (lambda t: t.replace(END_MARK, "#END ibqos block"), lambda b, e: e,
     "looks like a damaged ibqos marker"),
    (lambda t: t.replace(BEGIN_MARK, "# begin: ibqos managed"), lambda b, e: b,
     "damaged ibqos marker"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "line", "message"), MARKER_DAMAGE)
def test_render_refuses_markers_that_do_not_delimit_one_block(damage, line, message) -> None:
    good = render_policy(D, JOBS)
    block = find_block(_lines(good), BEGIN_MARK, END_MARK, "p")
    assert block is not None and block[0] == 7
    at = line(block[0] + 1, block[1] + 1)
    bad = damage(good)
    with pytest.raises(RenderError) as err:
        render_policy(bad, JOBS, source="/etc/opensm/qos-policy.conf")
    assert str(err.value).startswith(f"/etc/opensm/qos-policy.conf:{at}: ")
    assert message in str(err.value) and "\n" not in str(err.value)
    # check-opensm: OpenSM reads the file; ibqos will not rewrite it
    warned = [f for f in check_policy(bad, "p") if "ibqos will not rewrite" in f.message]
    assert [(f.line, f.severity) for f in warned] == [(at, "warning")]


def _begin_line(text: str) -> str:
    return next(line for line in _lines(text) if line.startswith(BEGIN_MARK))


def test_a_marker_indented_is_still_a_marker() -> None:
    good = render_policy(D, JOBS)
    moved = good.replace(BEGIN_MARK, "  " + BEGIN_MARK)
    assert render_policy(moved, JOBS) == good


def test_opensm_conf_markers_are_read_as_strictly() -> None:
    good = render_conf("qos TRUE\nrouting_engine ftree\n", {"qos": "TRUE"})
    lines = _lines(good)
    assert find_block(lines, CONF_BEGIN, CONF_END, "c") == (0, 4)  # marker, note, qos, end
    no_begin = "".join(lines[1:])
    with pytest.raises(RenderError, match=r"^/x/opensm\.conf:4: ibqos's end marker"):
        render_conf(no_begin, {"qos": "TRUE"}, source="/x/opensm.conf")
    with pytest.raises(RenderError, match=rf"^c:{len(lines) + 1}: a second ibqos block"):
        render_conf(good + good, {"qos": "TRUE"}, source="c")
    warned = [f for f in check_conf(no_begin, "c") if "ibqos will not rewrite" in f.message]
    assert [(f.line, f.severity) for f in warned] == [(4, "warning")]


# -- render_checked: the admin's line -------------------------------------------------------


@pytest.fixture
def site(tmp_path: Path):
    conf = tmp_path / "opensm.conf"
    conf.write_text(f"qos TRUE\npartition_config_file {tmp_path / 'partitions.conf'}\n")
    cfg = OpenSMConfig(conf=conf, policy_file=tmp_path / "qos-policy.conf")
    lanes = LaneConfig(data_vls=8, vlarb_low_cap=8, vlarb_high_cap=8, reserved_sls=(0,))
    decided = plan([JobState("1", expected="high")], lanes, None, 0).plan
    return cfg, lanes, decided, [("1", (0x10, 0x11), "app")]


def test_an_admins_line_opensm_drops_the_policy_for_stops_the_render(site) -> None:
    cfg, lanes, decided, jobs = site
    cfg.policy_file.write_text(D + ulps("ipoib, pkey 0x0123 : 4"))
    with pytest.raises(RenderError) as err:
        render_files(cfg, lanes, decided, jobs)
    assert str(err.value).startswith(f"{cfg.policy_file}:9: qos-ulps 'ipoib, pkey'")
    assert "the admin's line, outside ibqos's block: fix it by hand" in str(err.value)
    assert str(err.value).endswith("; nothing written")
    # the partition file opensm.conf names defines it: the render goes through
    (cfg.conf.parent / "partitions.conf").write_text("P1=0x0123 : ALL=full ;\n")
    assert render_checked(cfg, lanes, decided, jobs).warnings == ()


def test_an_admins_line_opensm_only_logs_passes_with_a_warning(site) -> None:
    cfg, lanes, decided, jobs = site
    cfg.policy_file.write_text(D + rule("pkey: 0x0123", "qos-level-name: DEFAULT"))
    rendered = render_checked(cfg, lanes, decided, jobs)
    (warning,) = rendered.warnings
    assert (warning.line, warning.severity) == (9, "warning")
    assert "ERR AC14" in warning.message and "the admin's line" in warning.message
    assert render_files(cfg, lanes, decided, jobs) == rendered.files
    assert "ibqos_job_1" in rendered.files[cfg.policy_file]


def test_a_begin_marker_deleted_by_hand_stops_the_render(site) -> None:
    cfg, lanes, decided, jobs = site
    first = render_files(cfg, lanes, decided, jobs)[cfg.policy_file]
    cfg.policy_file.write_text(first.replace(_begin_line(first), ""))
    with pytest.raises(RenderError, match=rf"^{cfg.policy_file}:\d+: ibqos's end marker"):
        render_files(cfg, lanes, decided, jobs)


def test_check_opensm_reads_the_partition_file_opensm_conf_names(tmp_path: Path) -> None:
    conf = tmp_path / "opensm.conf"
    conf.write_text("qos TRUE\npartition_config_file /srv/p.conf\n")
    assert partitions_file([tmp_path / "qos-policy.conf", conf]) == Path("/srv/p.conf")
    assert partitions_file([tmp_path / "qos-policy.conf"]) == DEFAULT_PARTITIONS_FILE
    policy = tmp_path / "qos-policy.conf"
    policy.write_text(D + ulps("ipoib, pkey 0x0123 : 4"))
    (finding,) = check_file(policy, partitions=NO_FILE)
    assert finding.severity == "error"
