"""The shipped characterization examples: every profile of ``characterize/profiles/`` loads
with the package's own loader, and is what ``ibqos characterize trace`` writes from its trace
in ``characterize/traces/`` today (the same model, figures, class and confidence), so the
examples cannot drift from the tool."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ibqos.characterize.trace import load_csv_trace
from ibqos.classify.profiles import ProfileStore, load_profile
from ibqos.cli import cli
from tests.support.paths import ROOT

EXAMPLES = ROOT / "characterize"
TRACES = EXAMPLES / "traces"
PROFILES = EXAMPLES / "profiles"
#: a traced observation's source: ``trace <file>: <first placement> on <fabric>``
TRACED = re.compile(r"^trace (?P<trace>[^:]+): (?P<placement>\S+) on (?P<fabric>.+)$")


def test_every_shipped_file_is_a_profile_under_its_own_name() -> None:
    files = sorted(PROFILES.iterdir())
    store = ProfileStore(PROFILES)  # checks every file, and that no two share a key
    assert files and [p.path for p in store.profiles] == files
    for profile in store.profiles:
        assert profile.path is not None and profile.file_name() == profile.path.name


@pytest.mark.parametrize("name", sorted(p.name for p in PROFILES.glob("*.yaml")))
def test_a_shipped_profile_is_a_fresh_characterization_of_its_trace(
    name: str, tmp_path: Path
) -> None:
    shipped = load_profile(PROFILES / name)
    (seen,) = shipped.observations  # written once, by one `--save`
    source = TRACED.match(seen.source)
    assert source is not None, seen.source
    trace = TRACES / source["trace"]
    ranks = load_csv_trace(trace).ranks
    assert shipped.nodes is not None and ranks % shipped.nodes == 0
    placements = [row["placement"] for row in shipped.characterized]
    assert placements[0] == source["placement"]
    config = tmp_path / "ibqos.yaml"
    config.write_text("{}\n")  # ibqos's default thresholds, whatever this machine has
    result = CliRunner().invoke(
        cli,
        [
            "characterize",
            "trace",
            str(trace),
            "--xgft",
            source["fabric"],
            "--ranks-per-node",
            str(ranks // shipped.nodes),
            *(arg for p in placements for arg in ("--placement", p)),
            "--config",
            str(config),
            "--save",
            shipped.application,
            "--profiles",
            str(tmp_path / "profiles"),
        ],
    )
    assert result.exit_code == 0, result.output
    fresh = load_profile(tmp_path / "profiles" / name)
    assert fresh.key == shipped.key
    assert fresh.model == shipped.model
    assert fresh.characterized == shipped.characterized
    assert (fresh.expected_class, fresh.confidence) == (shipped.expected_class, shipped.confidence)
    (now,) = fresh.observations
    assert replace(now, time_s=None) == replace(seen, time_s=None)  # all but when
