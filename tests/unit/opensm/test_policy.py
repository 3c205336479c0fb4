"""Tests for ibqos.opensm.policy: ibqos's block of qos-policy.conf and the OpenSM-like parser."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ibqos.errors import RenderError
from ibqos.lab.opensm import MINIMAL_POLICY
from ibqos.opensm.check import check_policy
from ibqos.opensm.policy import (
    BEGIN_MARK,
    END_MARK,
    PolicyJob,
    job_sls,
    parse_policy,
    render_policy,
    tokenize,
)
from tests.support.paths import TESTS

GOLDEN = TESTS / "data" / "opensm" / "golden"
G1, G2, G3 = 0x0002C90300A1B2C1, 0x0002C90300A1B2C2, 0x0002C90300A1B2C3
JOBS = [PolicyJob("1234", 3, (G1, G2), "cfd"), PolicyJob("77", 4, (G3,))]
STORAGE = """\
# site policy
port-groups
  port-group
    name: storage
    port-name: "oss01 HCA-1/P1"
  end-port-group
end-port-groups
qos-levels
  qos-level
    name: default
    sl: 0
  end-qos-level
  qos-level
    name: fast
    sl: 5
  end-qos-level
end-qos-levels
qos-match-rules
  qos-match-rule
    destination: storage
    qos-level-name: fast
  end-qos-match-rule
end-qos-match-rules
"""


def block(text: str) -> str:
    return text[text.index(BEGIN_MARK) : text.index(END_MARK)]


# -- rendering ------------------------------------------------------------------------------


def test_render_without_a_file() -> None:
    out = render_policy(None, JOBS)
    assert out.startswith(BEGIN_MARK) and out.endswith(END_MARK + "\n")
    policy = parse_policy(out)
    assert policy.error is None and policy.notes == ()
    assert [g.name for g in policy.port_groups] == ["ibqos_job_77", "ibqos_job_1234"]  # natural
    assert policy.group("IBQOS_JOB_1234").exact_guids == (G1, G2)  # type: ignore[union-attr]
    assert [(q.name, q.sl) for q in policy.qos_levels] == [
        ("DEFAULT", 0),
        ("ibqos_sl_3", 3),
        ("ibqos_sl_4", 4),
    ]
    assert policy.sl_of_group("ibqos_job_1234") == 3
    assert job_sls(policy) == {"1234": 3, "77": 4}
    rule = policy.match_rules[1]
    assert (rule.sources, rule.destinations) == (("ibqos_job_1234",),) * 2
    assert "    port-guid: 0x0002c90300a1b2c1\n    port-guid: 0x0002c90300a1b2c2\n" in out
    assert check_policy(out, "p") == []


def test_render_keeps_the_admin_part_and_puts_its_block_last() -> None:
    out = render_policy(STORAGE, JOBS)
    assert out.startswith(STORAGE)
    policy = parse_policy(out)
    # the admin's rule comes first: OpenSM tries rules in file order
    assert [r.level for r in policy.match_rules] == ["fast", "ibqos_sl_4", "ibqos_sl_3"]
    assert policy.default_sl == 0
    assert "name: DEFAULT" not in out  # the admin's "default" is the one
    assert check_policy(out, "p") == []


def test_a_block_the_admin_moved_goes_back_to_the_end() -> None:
    out = render_policy(STORAGE, JOBS)
    head, tail = STORAGE.split("qos-match-rules\n", 1)
    moved = head + block(out) + END_MARK + "\n" + "qos-match-rules\n" + tail
    again = render_policy(moved, JOBS)
    assert again == out  # the admin's lines in their order, ibqos's block last


def test_render_is_idempotent() -> None:
    for admin in (None, "", STORAGE, MINIMAL_POLICY, STORAGE.rstrip("\n")):
        once = render_policy(admin, JOBS)
        assert render_policy(once, JOBS) == once


def test_a_missing_last_newline_is_added() -> None:
    out = render_policy("# only a comment", [])
    assert out.startswith("# only a comment\n" + BEGIN_MARK)


@pytest.mark.parametrize(
    ("admin", "default_here"),
    [
        ("", True),
        (MINIMAL_POLICY, False),
        (MINIMAL_POLICY.replace("DEFAULT", "Default"), False),  # strcasecmp
        ("qos-ulps\n  default : 2\nend-qos-ulps\n", False),  # the simple default counts too
        (MINIMAL_POLICY.replace("DEFAULT", "other"), True),
    ],
)
def test_default_only_when_the_admin_has_none(admin: str, default_here: bool) -> None:
    out = render_policy(admin, JOBS, default_sl=1)
    assert ("name: DEFAULT" in block(out)) is default_here
    policy = parse_policy(out)
    assert policy.default_sl == (1 if default_here else parse_policy(admin).default_sl)
    assert check_policy(out, "p") == []


def test_a_job_without_ports_gets_no_group() -> None:
    out = render_policy(None, [PolicyJob("5", 2, ()), *JOBS])
    assert "# job 5: no port GUID known, so no port-group and no rule\n" in out
    assert "ibqos_job_5" not in out and "ibqos_sl_2" not in out
    assert check_policy(out, "p") == []
    only = render_policy(None, [PolicyJob("5", 2, ())])
    assert "port-groups" not in only and check_policy(only, "p") == []


def test_no_jobs_is_a_valid_policy() -> None:
    out = render_policy(None, [])
    assert "port-groups" not in out  # an empty port-groups section is a syntax error
    assert parse_policy(out).default_sl == 0
    assert check_policy(out, "p") == []
    with_default = render_policy(MINIMAL_POLICY, [])
    assert block(with_default).count("\n") == 4  # only comments
    assert check_policy(with_default, "p") == []


def test_names_are_plain_unique_and_avoid_the_admins() -> None:
    admin = STORAGE.replace("name: storage", "name: IBQOS_JOB_7").replace(
        "destination: storage", "destination: ibqos_job_7"
    )
    admin = admin.replace("name: fast", "name: ibqos_sl_1")
    admin = admin.replace("qos-level-name: fast", "qos-level-name: ibqos_sl_1")
    jobs = [
        PolicyJob("7", 1, (G1,)),
        PolicyJob("1.5", 2, (G2,)),
        PolicyJob("1_5", 2, (G3,)),
        PolicyJob("job-port-groups", 2, (G3 + 1,)),  # a keyword in the id
        PolicyJob("...", 2, (G3 + 2,)),
    ]
    out = render_policy(admin, jobs)
    policy = parse_policy(out)
    mine = [g.name for g in policy.port_groups[1:]]
    assert mine == [  # job ids in natural order: 1.5, 1_5, 7, ..., job-port-groups
        "ibqos_job_1_5",
        "ibqos_job_1_5_2",
        "ibqos_job_7_2",
        "ibqos_job_x",
        "ibqos_job_job_port_groups",
    ]
    assert [q.name for q in policy.qos_levels[2:]] == ["ibqos_sl_1_2", "ibqos_sl_2"]
    assert policy.sl_of_group("ibqos_job_7_2") == 1
    assert check_policy(out, "p") == []


def test_use_text_cannot_open_a_quote_or_a_comment() -> None:
    job = PolicyJob('9"; # drop', 2, (G1,), name='"evil" # name\nend-port-groups')
    out = render_policy(None, [job])
    assert check_policy(out, "p") == []
    assert job_sls(parse_policy(out)) == {"9_;": 2}


def test_render_refuses_an_admin_part_opensm_would_drop() -> None:
    bad = STORAGE.replace("name: storage", "name: my-port-groups")
    with pytest.raises(RenderError, match=r"^p\.conf:4: syntax error.*keyword 'port-groups'"):
        render_policy(bad, JOBS, source="p.conf")
    # line numbers are the file's, even with ibqos's block above the error
    moved = render_policy(None, JOBS) + bad
    line = moved.splitlines().index("    name: my-port-groups") + 1
    with pytest.raises(RenderError, match=f"^p.conf:{line}:"):
        render_policy(moved, JOBS, source="p.conf")


def test_render_refuses_a_damaged_block() -> None:
    out = render_policy(None, JOBS).replace(END_MARK, "# the end")
    with pytest.raises(RenderError, match="no end marker"):
        render_policy(out, JOBS)


@pytest.mark.parametrize(
    ("jobs", "match"),
    [
        ([PolicyJob("1", 1, ()), PolicyJob("1", 2, ())], "listed twice"),
        ([PolicyJob("1", 16, ())], "SL 16"),
        ([PolicyJob("1", 1, (0,))], "not 64-bit"),
        ([PolicyJob("1", 1, (2**64,))], "not 64-bit"),
    ],
)
def test_render_refuses_bad_jobs(jobs: list[PolicyJob], match: str) -> None:
    with pytest.raises(RenderError, match=match):
        render_policy(None, jobs)


def test_golden() -> None:
    """The site policy of golden/ with two jobs (the same plan as the opensm.conf golden)."""
    jobs = [
        PolicyJob("1234", 1, (0x0C42A10301000001, 0x0C42A10301000011), "cfd_solver"),
        PolicyJob("1235", 2, (0x0C42A10301000005,), "post-proc"),
    ]
    out = render_policy((GOLDEN / "qos-policy.conf.in").read_text(), jobs)
    assert out == (GOLDEN / "qos-policy.conf").read_text()
    assert check_policy(out, "golden") == []


# -- the lexer and the parser ---------------------------------------------------------------


def kinds(text: str) -> list[str]:
    return [t.kind if t.kind != "TEXT" else t.text for t in tokenize(text)][:-1]


def test_tokenize_longest_match_and_value_states() -> None:
    assert kinds("qos-level-name: x\n") == ["qos-level-name:", "x"]  # not qos-level
    assert kinds("end-qos-levels") == ["end-qos-levels"]
    assert kinds("name: a-1:2\n") == ["name:", "a", "-", "1", ":", "2"]  # text in a name
    assert kinds("sl: 0x1f\n") == ["sl:", "NUMBER"]
    assert kinds("use: port-groups, sl: 3\n") == [
        "use:", "port-groups", ",", " ", "sl: ", "3",
    ]  # fmt: skip
    assert kinds("node-type: ca, Switch\nname: cache\n") == [
        "node-type:", "CA", "COMMA", "SWITCH", "name:", "ca", "c", "h", "e",
    ]  # fmt: skip
    assert kinds('port-name: "a b/P1"\n') == ["port-name:", "a b/P1"]
    assert kinds("Default : 3\nany, service-id 1-2 : 3\n") == [
        "default:", "NUMBER", "any,service-id", "NUMBER", "DASH", "NUMBER", "DOTDOT", "NUMBER",
    ]  # fmt: skip
    tok = list(tokenize("a\n  b # c\nd # e"))
    assert [(t.text, t.line, t.col, t.gap, t.newline) for t in tok] == [
        ("a", 1, 1, False, False),
        ("b", 2, 3, True, True),
        ("d", 3, 1, False, True),
        ("#", 3, 3, True, False),  # a comment needs its newline: without, '#' is text
        ("e", 3, 5, True, False),
        ("", 3, 6, False, False),
    ]


def test_parse_the_reference_example() -> None:
    text = (GOLDEN.parent / "reference-example.conf").read_text()
    policy = parse_policy(text, "ref")
    assert policy.error is None
    assert [s.kind for s in policy.sections] == ["port-groups", "qos-levels", "qos-match-rules"]
    job, storage = policy.port_groups
    assert (job.name, job.line, job.use, job.exact_guids) == (
        "job_1234",
        3,
        "heavy job 1234",
        (G1, G2),
    )
    assert storage.port_names == ("oss01 HCA-1/P1", "oss02 HCA-1/P1")
    assert [(q.name, q.sl) for q in policy.qos_levels] == [
        ("DEFAULT", 0),
        ("bulk", 1),
        ("latency", 2),
    ]
    assert policy.sl_of_group("job_1234") == 1
    assert policy.match_rules[1].destinations == ("storage",)
    assert policy.sl_of_group("storage") is None  # only a destination


def test_parse_stops_at_the_first_error_like_opensm() -> None:
    text = MINIMAL_POLICY + "port-groups\n  port-group\n    name: a\n  port-group\n"
    policy = parse_policy(text)
    assert policy.error is not None and policy.error.line == 11
    assert [q.name for q in policy.qos_levels] == ["DEFAULT"]
    assert policy.port_groups == ()


def test_sections_may_repeat_in_any_order() -> None:
    text = (
        "qos-match-rules\n qos-match-rule\n  qos-level-name: b\n end-qos-match-rule\n"
        "end-qos-match-rules\n" + MINIMAL_POLICY + "qos-levels\n qos-level\n  name: b\n  sl: 2\n"
        " end-qos-level\nend-qos-levels\nqos-levels\nend-qos-levels\n"
    )
    policy = parse_policy(text)
    assert policy.error is None
    assert [q.name for q in policy.qos_levels] == ["DEFAULT", "b"]
    assert check_policy(text, "p") == []  # the rule names a level defined later: fine


# -- properties -----------------------------------------------------------------------------

_ID = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_JOBS = st.lists(
    st.builds(
        PolicyJob,
        job_id=_ID,
        sl=st.integers(0, 15),
        port_guids=st.lists(st.integers(1, 2**64 - 1), max_size=4, unique=True).map(tuple),
        name=st.text(max_size=20),
    ),
    max_size=6,
    unique_by=lambda j: j.job_id,
)
_ADMIN = st.sampled_from(
    [
        None,
        "",
        MINIMAL_POLICY,
        STORAGE,
        STORAGE.rstrip("\n"),
        "qos-ulps\n  default : 3\n  sdp : 2\nend-qos-ulps\n# last",
        STORAGE.replace("name: storage", "name: ibqos_job_1").replace("storage\n", "ibqos_job_1\n"),
    ]
)


@settings(max_examples=150, deadline=None)
@given(admin=_ADMIN, jobs=_JOBS, default_sl=st.integers(0, 15))
def test_render_properties(admin: str | None, jobs: list[PolicyJob], default_sl: int) -> None:
    guids = [g for job in jobs for g in job.port_guids]
    assume(len(set(guids)) == len(guids))
    out = render_policy(admin, jobs, default_sl=default_sl)
    assert out.endswith("\n")
    assert out.startswith(admin or "")  # the admin's part, byte for byte, first
    assert check_policy(out, "p") == []
    assert render_policy(out, jobs, default_sl=default_sl) == out
    policy = parse_policy(out)
    mine = [g for g in policy.port_groups if g.line > (admin or "").count("\n")]
    assert len(mine) == len([j for j in jobs if j.port_guids])
    by_guids = {g.exact_guids: policy.sl_of_group(g.name) for g in mine}
    for job in jobs:
        if job.port_guids:
            assert by_guids[job.port_guids] == job.sl
    want_default = default_sl if parse_policy(admin or "").default_sl is None else None
    assert want_default is None or policy.default_sl == want_default
