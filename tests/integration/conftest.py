"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from tests.integration.labcheck import JOBS


@pytest.fixture
def jobs(tmp_path):
    """A job file of two jobs on cn0001-cn0008, for labs of 8 hosts or more."""
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    return path
