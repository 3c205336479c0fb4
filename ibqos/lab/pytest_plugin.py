"""pytest fixtures for tests that need a real lab fabric.

Enable with ``pytest_plugins = ["ibqos.lab.pytest_plugin"]`` in a conftest.  ``make_lab``
creates and starts labs under the test's temporary directory, owned by the test process;
whatever the test does, every lab it made is stopped (its own processes, by pid) and
removed at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab

MakeLab = Callable[..., Lab]


@pytest.fixture
def make_lab(tmp_path: Path) -> Iterator[MakeLab]:
    """Factory: ``make_lab("2;8,4;1,2", jobs=path, name="a", **Lab.create options)``."""
    labs: list[Lab] = []

    def factory(xgft: str, *, name: str = "lab", start: bool = True, **options: Any) -> Lab:
        topo = build_xgft(parse_xgft(xgft))
        lab = Lab.create(name, topo, root=tmp_path / "labs", **options)
        labs.append(lab)
        if start:
            lab.start()
        return lab

    yield factory
    for lab in labs:
        lab.destroy()
