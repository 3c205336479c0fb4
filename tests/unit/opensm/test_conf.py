"""Tests for ibqos.opensm.conf: the managed QoS keys of opensm.conf, rendered and read back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ibqos.config.lanes import LaneConfig
from ibqos.errors import RenderError
from ibqos.opensm.conf import (
    BEGIN_MARK,
    END_MARK,
    conf_lines,
    managed_keys,
    managed_values,
    parse_conf,
    render_conf,
    routing_engine,
    split_lines,
    strtoul,
)
from ibqos.plan.planner import JobState, Tables, plan
from tests.support.paths import TESTS

GOLDEN = TESTS / "data" / "opensm" / "golden"
SL2VL = (0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def tables(
    sl_to_vl: tuple[int, ...] = SL2VL,
    low: tuple[tuple[int, int], ...] = ((0, 32), (2, 64), (1, 32)),
    high: tuple[tuple[int, int], ...] = (),
    high_limit: int = 0,
) -> Tables:
    return Tables(sl_to_vl, low, high, high_limit, (), 0.0, 2.0, 2.0, 0.0)


def test_managed_keys_follow_port_types() -> None:
    assert managed_keys(["swe"]) == (
        "qos",
        "qos_swe_sl2vl",
        "qos_swe_vlarb_high",
        "qos_swe_vlarb_low",
        "qos_swe_high_limit",
    )
    assert managed_keys(["rtr", "ca"])[1:3] == ("qos_ca_sl2vl", "qos_ca_vlarb_high")
    with pytest.raises(RenderError, match="port types"):
        managed_keys(["ca", "hca"])


def test_managed_values() -> None:
    values = managed_values(tables(high_limit=4), ("ca", "swe"))
    assert values == {
        "qos": "TRUE",
        "qos_ca_sl2vl": "0,1,2,0,0,0,0,0,0,0,0,0,0,0,0,0",
        "qos_ca_vlarb_high": "0:0",  # explicit: absent, OpenSM's default 0:4,... would apply
        "qos_ca_vlarb_low": "0:32,2:64,1:32",
        "qos_ca_high_limit": "4",
        "qos_swe_sl2vl": "0,1,2,0,0,0,0,0,0,0,0,0,0,0,0,0",
        "qos_swe_vlarb_high": "0:0",
        "qos_swe_vlarb_low": "0:32,2:64,1:32",
        "qos_swe_high_limit": "4",
    }
    assert managed_values(tables(high=((3, 255),)), ["sw0"])["qos_sw0_vlarb_high"] == "3:255"


def test_routing_engine_owns_sls_only_qos_is_managed() -> None:
    assert managed_values(None, ("ca", "swe")) == {"qos": "TRUE"}


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (tables(sl_to_vl=SL2VL[:15]), "16 VLs"),
        (tables(sl_to_vl=(16, *SL2VL[1:])), "16 VLs"),
        (tables(low=((15, 64),)), "VL 0-14"),  # OpenSM would program VL 0
        (tables(low=((1, 256),)), "weight 0-255"),
        (tables(low=((1, 1),) * 65), "64"),
        (tables(high_limit=256), "high_limit"),
    ],
)
def test_managed_values_refuse_what_opensm_misreads(bad: Tables, match: str) -> None:
    with pytest.raises(RenderError, match=match):
        managed_values(bad, ("swe",))


ADMIN = (
    "# site opensm.conf\r\n"  # CRLF stays
    "routing_engine ftree\n"
    "qos FALSE   # was off\n"
    "qos_max_vls 8\n"
    "  qos_swe_sl2vl 0,1,2,3,4,5,6,7,7,7,7,7,7,7,7,7\n"  # indented: still the key
    "qos_sl2vl 0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n"  # generic: not ibqos's
    "qos_rtr_vlarb_low 0:4\n"  # a port type ibqos does not manage
    "#qos_ca_sl2vl 0,0,0\n"  # a comment, kept
    "log_flags 0x03 \t\n"  # trailing blanks kept
    "qos_swe_vlarb_low 0:1\n"
    "sweep_interval 10"  # no newline at the end
)


def test_render_keeps_every_other_line_byte_for_byte() -> None:
    values = managed_values(tables(), ("ca", "swe"))
    out = render_conf(ADMIN, values)
    lines = split_lines(out)
    begin = next(i for i, line in enumerate(lines) if line.startswith(BEGIN_MARK))
    end = next(i for i, line in enumerate(lines) if line.startswith(END_MARK))
    assert begin == 2  # where the first managed key (qos) was
    assert lines[begin + 1 : end] == [f"{k} {v}\n" for k, v in values.items()]
    outside = lines[:begin] + lines[end + 1 :]
    assert "".join(outside) == "".join(
        line for line in split_lines(ADMIN) if line.split("#")[0].split()[:1] not in (
            ["qos"], ["qos_swe_sl2vl"], ["qos_swe_vlarb_low"],
        )
    )  # fmt: skip
    assert out.endswith("sweep_interval 10")  # the admin's last line, as it was
    got = parse_conf(out)
    assert {k: got[k] for k in values} == values
    assert got["qos_sl2vl"].startswith("0,1,1")  # still there for the types ibqos leaves alone
    assert got["qos_rtr_vlarb_low"] == "0:4"


def test_render_is_idempotent_and_replaces_its_block_in_place() -> None:
    values = managed_values(tables(), ("ca", "swe"))
    once = render_conf(ADMIN, values)
    assert render_conf(once, values) == once
    # an admin adds a managed key before the block: the block stays where it was
    edited = "qos_ca_high_limit 9\n" + once
    again = render_conf(edited, values)
    assert again == once
    # new values replace the old block in place, and the old block's keys go with it
    other = render_conf(once, managed_values(None, ("ca", "swe")))
    assert "qos_ca_sl2vl" not in parse_conf(other)
    assert split_lines(other)[2].startswith(BEGIN_MARK)
    assert "routing engine owns SLs" in other
    assert render_conf(other, values) == once


def test_render_at_the_end_when_nothing_is_managed_yet() -> None:
    out = render_conf("routing_engine ftree\nlog_flags 0x03", {"qos": "TRUE"})
    assert out.startswith("routing_engine ftree\nlog_flags 0x03\n" + BEGIN_MARK)
    assert out.endswith(f"qos TRUE\n{END_MARK}\n")
    assert render_conf("", {"qos": "TRUE"}).startswith(BEGIN_MARK)


def test_render_refuses_a_block_without_its_end() -> None:
    broken = render_conf("", {"qos": "TRUE"}).replace(END_MARK, "# ended by hand")
    with pytest.raises(RenderError, match=r"^opensm\.conf:1: ibqos's block has no end marker"):
        render_conf(broken, {"qos": "TRUE"})


@pytest.mark.parametrize(
    "bad", [{"qos": "TRUE\nqos_ca_sl2vl 0"}, {"qos": "TRUE # x"}, {"a b": "1"}]
)
def test_render_refuses_values_that_are_not_one_line(bad: dict[str, str]) -> None:
    with pytest.raises(RenderError, match="on one line"):
        render_conf("", bad)


def test_golden() -> None:
    """A commented site file in, the file OpenSM gets out (see the README there)."""
    admin = (GOLDEN / "opensm.conf.in").read_text()
    cfg = LaneConfig(data_vls=8, vlarb_low_cap=8, vlarb_high_cap=8, reserved_sls=(0,))
    jobs = [JobState("1234", expected="high"), JobState("1235", expected="low")]
    result = plan(jobs, cfg, None, 0.0)
    out = render_conf(admin, managed_values(result.plan.tables, ("ca", "swe")))
    assert out == (GOLDEN / "opensm.conf").read_text()


# -- reading --------------------------------------------------------------------------------


def test_parse_conf_reads_as_opensm_does() -> None:
    text = (
        "qos TRUE\n"
        "\tqos_policy_file   '/etc/opensm/my policy.conf'  \n"  # tabs, quotes, blanks
        'routing_engine "ftree,minhop"\n'
        "qos FALSE # the last one wins\n"
        "qos_ca_sl2vl 0,1 # comment\n"
        "qos=TRUE\n"  # not a key OpenSM knows: kept as a key of its own
        "log_file\n"  # no value
        "# qos TRUE\n"
        "\n"
    )
    assert parse_conf(text) == {
        "qos": "FALSE",
        "qos_policy_file": "/etc/opensm/my policy.conf",
        "routing_engine": "ftree,minhop",
        "qos_ca_sl2vl": "0,1",
        "qos=TRUE": "",
        "log_file": "",
    }
    assert [(c.line, c.key) for c in conf_lines(text)][:2] == [(1, "qos"), (2, "qos_policy_file")]


def test_routing_engine() -> None:
    assert routing_engine(parse_conf("routing_engine lash,minhop\n")) == "lash,minhop"
    assert routing_engine(parse_conf("routing_engine (null)\n")) == ""
    assert routing_engine({}) == ""


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("12", (12, 2)),
        ("  7,", (7, 3)),
        ("0x1F:", (31, 4)),
        ("010", (8, 3)),  # octal
        ("08", (0, 1)),  # octal stops at 8
        ("0x", (0, 1)),  # "0", then the x is left
        (":5", (0, 0)),  # no digits: nothing read, end = start
        ("-1", (2**64 - 1, 2)),
        ("99999999999999999999999", (2**64 - 1, 23)),
    ],
)
def test_strtoul_is_c_strtoul_base_0(text: str, want: tuple[int, int]) -> None:
    assert strtoul(text) == want


# -- properties -----------------------------------------------------------------------------

_LINE = st.text(st.sampled_from("qos_ca_sl2vl swe01#:, \t\r\"'x=TRUE"), max_size=30)


@given(
    admin=st.lists(_LINE, max_size=8).map("\n".join),
    types=st.lists(st.sampled_from(["ca", "swe", "sw0", "rtr"]), unique=True),
    with_tables=st.booleans(),
)
def test_render_properties(admin: str, types: list[str], with_tables: bool) -> None:
    values = managed_values(tables() if with_tables else None, types)
    out = render_conf(admin, values)
    assert render_conf(out, values) == out  # idempotent
    assert {k: v for k, v in parse_conf(out).items() if k in values} == values
    # the admin's lines that are not managed keys are all there, in order
    kept = [
        line for line in split_lines(admin) if not ((e := conf_lines(line)) and e[0].key in values)
    ]
    rest = [line for line in split_lines(out) if line in kept or line.rstrip("\n") in kept]
    assert [line.rstrip("\n") for line in rest] == [line.rstrip("\n") for line in kept]
