"""``ibqos[characterize]``: without matplotlib or otf2 (an agent's install), what needs one
says so in one line, and the rest of ``ibqos characterize`` works.

Each test runs ibqos in a fresh interpreter where the library cannot be imported
(``sys.modules[name] = None`` makes its import fail as a missing module does).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).resolve().parents[2] / "characterize/traces/stencil-trace.csv"

#: ibqos's main in a process where *missing* cannot be imported
WITHOUT = "import sys; sys.modules[{missing!r}] = None; from ibqos.cli import main; main()"


def ibqos_without(missing: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT.format(missing=missing), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_plots_without_matplotlib_say_what_to_install(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("characterize", "trace", str(TRACE), "--xgft", "2;8,4;1,2", "--out", str(out))
    done = ibqos_without("matplotlib", *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "ibqos: characterize: the plots need matplotlib: pip install 'ibqos[characterize]'\n"
    )
    assert not out.exists()  # nothing written


def test_tables_need_no_matplotlib() -> None:
    args = ("characterize", "trace", str(TRACE), "--xgft", "2;8,4;1,2", "--format", "json")
    done = ibqos_without("matplotlib", *args)
    assert done.returncode == 0, done.stderr
    assert '"placements"' in done.stdout


@pytest.mark.parametrize("trace", ["run.otf2", "archive-dir"])
def test_an_otf2_trace_without_otf2_says_what_to_install(tmp_path: Path, trace: str) -> None:
    path = tmp_path / trace
    if trace == "archive-dir":
        path.mkdir()
    done = ibqos_without("otf2", "characterize", "trace", str(path), "--xgft", "2;8,4;1,2")
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr
        == "ibqos: characterize: OTF2 traces need otf2: pip install 'ibqos[characterize]'\n"
    )
