"""A command's fabric, ``--xgft`` or ``--topology`` (ibqos.fabric.given): exactly one."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.errors import FabricChoiceError, TopologyError
from ibqos.fabric.given import given_fabric
from ibqos.fabric.xgft import XgftSpec


def test_an_xgft_is_parsed() -> None:
    assert given_fabric("2;8,4;1,2", None, "it") == XgftSpec(2, (8, 4), (1, 2))


def test_a_topology_is_its_path_unread(tmp_path: Path) -> None:
    missing = tmp_path / "nope.net"
    assert given_fabric(None, missing, "it") == missing


@pytest.mark.parametrize(("xgft", "topology"), [(None, None), ("2;8,4;1,2", Path("fabric.net"))])
def test_neither_or_both_says_what_the_command_takes(
    xgft: str | None, topology: Path | None
) -> None:
    with pytest.raises(FabricChoiceError) as info:
        given_fabric(xgft, topology, "--xgft SPEC or --topology FILE")
    assert str(info.value) == "give --xgft SPEC or --topology FILE"
    assert info.value.category == "topology" and isinstance(info.value, TopologyError)
    with pytest.raises(FabricChoiceError) as info:
        given_fabric(xgft, topology, "it", category="simulate")
    assert info.value.category == "simulate"


def test_a_bad_spec_is_a_topology_error() -> None:
    with pytest.raises(TopologyError, match="--xgft '2;8,4': expected") as info:
        given_fabric("2;8,4", None, "it")
    assert not isinstance(info.value, FabricChoiceError)
