"""Reading back what OpenSM serves: recorded saquery replies, and the comparison."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ibqos.errors import IbqosError
from ibqos.opensm.verify import Expected, PathCheck, check, parse_path_sl, parse_rows
from tests.support.paths import TESTS

DATA = TESTS / "data" / "saquery"


def reply(name: str) -> str:
    return (DATA / name).read_text()


def test_recorded_replies_parse() -> None:
    assert parse_path_sl(reply("pr-10-11.txt")) == 0
    assert parse_rows(reply("sl2vl-5-1-2.txt"), "VL") == [*range(8), *range(8)]
    vlar = reply("vlar-5-1-1.txt")
    assert parse_rows(vlar, "VL")[:8] == list(range(8))
    assert parse_rows(vlar, "Weight")[:8] == [0, 4, 4, 4, 4, 4, 4, 4]
    assert len(parse_rows(vlar, "Weight")) == 32  # block 1: entries 0-31
    with pytest.raises(IbqosError, match="no PathRecord"):
        parse_path_sl(reply("pr-no-path.txt"))


def runner(replies: dict[str, str]):
    def run(argv: Sequence[str]) -> str:
        return replies[argv[1]]

    return run


def test_check_compares_what_sa_serves() -> None:
    replies = {
        "SL2VL": reply("sl2vl-5-1-2.txt"),
        "VLAR": reply("vlar-5-1-1.txt"),
        "PR": reply("pr-10-11.txt"),
    }
    served = Expected(
        sl2vl=(*range(8), *range(8)),
        sl2vl_port=(5, 1, 2),
        vlarb_low=tuple((vl, 4) for vl in range(1, 8)),
        vlarb_port=(5, 1),
        paths=(PathCheck("a", 10, 11, 0),),
    )
    assert check(served, runner(replies)) == []
    wrong = Expected(
        sl2vl=(0,) * 16,
        sl2vl_port=(5, 1, 2),
        vlarb_low=((0, 32), (1, 64)),
        vlarb_port=(5, 1),
        paths=(PathCheck("a", 10, 11, 3),),
    )
    problems = check(wrong, runner(replies))
    assert len(problems) == 3
    assert problems[0].startswith("SL2VL of switch lid 5 1->2: OpenSM serves 0,1,2")
    assert "VLArb low of switch lid 5 port 1: OpenSM serves 1:4,2:4" in problems[1]
    assert problems[2] == "job a: PathRecord lid 10->11 has SL 0, the policy gives SL 3"


def test_a_failing_query_is_a_problem_not_a_crash() -> None:
    def run(argv: Sequence[str]) -> str:
        raise IbqosError("saquery: timed out")

    problems = check(Expected(paths=(PathCheck("a", 1, 2, 1),)), run)
    assert problems == ["saquery PR --slid 1 --dlid 2: saquery: timed out"]
