"""Where the tests find the repository and their recorded data."""

from __future__ import annotations

from pathlib import Path

#: The repository's root directory.
ROOT = Path(__file__).resolve().parents[2]
#: ``tests/``.
TESTS = ROOT / "tests"
#: ``tests/data/``: real tools' output and the files others wrote, with their sources.
DATA = TESTS / "data"
