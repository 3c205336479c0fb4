"""Forwarding tables as text: ibroute output and OpenSM's dump, on recorded real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.collect.routes import switch_lids
from ibqos.errors import TopologyError
from ibqos.fabric.lfts import missing_switches, parse_ibroute, read_lft_dump
from ibqos.fabric.model import fabric_from_file
from ibqos.fabric.routes import parse_lft_dump
from tests.support.paths import TESTS

DATA = TESTS / "data"
LAB = DATA / "lfts" / "lab-xgft-2_4.2_1.2"
DUMPS = [*sorted(DATA.glob("lab-xgft-*/opensm-lfts.dump")), LAB / "opensm-lfts.dump"]


def ibroute_tables() -> dict[int, dict[int, int]]:
    tables = {}
    for path in sorted((LAB / "ibroute-n").glob("*.txt")):
        lid, table = parse_ibroute(path.read_text(), str(path))
        assert str(lid) == path.stem
        tables[lid] = table
    return tables


def test_ibroute_gives_the_tables_opensm_dumped() -> None:
    # what the switches answer by SMP is what OpenSM says it programmed, entry for entry
    dump = read_lft_dump((LAB / "opensm-lfts.dump").read_text())
    assert ibroute_tables() == dump
    assert len(dump) == 4 and all(len(t) >= 12 for t in dump.values())


def test_ibroute_with_destination_names_parses_alike() -> None:
    named = parse_ibroute((LAB / "ibroute-names.txt").read_text())
    plain = parse_ibroute((LAB / "ibroute-n" / f"{named[0]}.txt").read_text())
    assert named == plain


def test_ibroute_entries_by_hand() -> None:
    text = (
        "Unicast lids [0x0-0xd] of switch Lid 4 guid 0x0c42a10300020001 (sw-L2-0001):\n"
        "  Lid  Out   Destination\n"
        "       Port     Info \n"
        "0x0001 001 \n"
        "0x0004 000 \n"
        "0x000d 255 : (unreachable)\n"
        "0x00c0 036 : (Switch portguid 0x0000000000000001: 'x')\n"
        "4 lids dumped \n"
    )
    assert parse_ibroute(text) == (4, {1: 1, 4: 0, 0xC0: 36})


HEAD = "Unicast lids [0x0-0xd] of switch Lid 4 guid 0x0c42a10300020001 (sw-L2-0001):"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "ibroute:0: no forwarding table in the output", id="empty"),
        pytest.param(
            "ibroute: iberror: failed: dump tables: not a switch\n",
            "ibroute:1: cannot parse 'ibroute: iberror: failed: dump tables: not a switch'",
            id="iberror",
        ),
        pytest.param(
            "0x0001 001\n", "ibroute:1: LFT entry before the table's header", id="no-head"
        ),
        pytest.param(
            f"{HEAD}\n0x0001 001\n0x0002 001\n",
            "ibroute:3: ends before 'lids dumped' (output cut short)",
            id="cut-short",
        ),
        pytest.param(
            f"{HEAD}\n0x0001 001\n3 valid lids dumped\n",
            "ibroute:3: says 3 lids dumped, 1 were printed",
            id="count",
        ),
        pytest.param(f"{HEAD}\n0x0001 0x1\n", "ibroute:2: cannot parse '0x0001 0x1'", id="port"),
        pytest.param(
            f"{HEAD}\n{HEAD}\n", "ibroute:2: a second table in one ibroute output", id="two"
        ),
    ],
)
def test_ibroute_bad_text_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_ibroute(text)
    assert str(info.value) == message


def test_ibroute_of_a_ca_recorded() -> None:
    stdout = (LAB / "ibroute-bad-lid" / "stdout.txt").read_text()
    with pytest.raises(TopologyError, match=r"^ibroute -n 2:1: cannot parse 'ibroute: iberror"):
        parse_ibroute(stdout, "ibroute -n 2")


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.parent.name)
def test_whole_dumps_read_as_the_plain_parser_does(path: Path) -> None:
    text = path.read_text()
    assert read_lft_dump(text, str(path)) == parse_lft_dump(text, str(path))


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.parent.name)
def test_a_dump_caught_half_written_is_refused(path: Path) -> None:
    text = path.read_text()
    # up to the line before the second table's end (OpenSM's stdio buffer ends anywhere)
    second = text.index(" lids dumped", text.index(" lids dumped") + 1)
    cut = text[: text.rindex("\n", 0, second) + 1]
    with pytest.raises(TopologyError, match=r"ends inside the table of switch Lid \d+"):
        read_lft_dump(cut, "opensm-lfts.dump")


def test_a_dump_line_that_does_not_parse_names_file_and_line() -> None:
    text = (LAB / "opensm-lfts.dump").read_text().replace("0x0002 ", "0xg002 ", 1)
    line = 1 + text[: text.index("0xg002")].count("\n")
    with pytest.raises(TopologyError) as info:
        read_lft_dump(text, "lfts")
    assert str(info.value) == f"lfts:{line}: cannot parse {text.splitlines()[line - 1][:60]!r}"


def test_missing_switches_against_the_discovered_fabric() -> None:
    fabric = fabric_from_file(LAB / "ibnetdiscover.txt")

    lids = switch_lids(fabric)
    tables = read_lft_dump((LAB / "opensm-lfts.dump").read_text())
    assert sorted(tables) == lids
    assert missing_switches(tables, lids) == []
    del tables[lids[1]]
    assert missing_switches(tables, lids) == [lids[1]]
