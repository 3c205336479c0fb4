"""The fault suite's fixture: a lab and an agent on it, stopped by pid at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.faultcheck import XGFT, Guard
from tests.support.agentrun import QUIET, write_jobs


@pytest.fixture
def agent_on_lab(make_lab, tmp_path: Path) -> Iterator[Callable[..., Guard]]:
    """Factory: ``agent_on_lab(*jobs, lab_options=..., start=True, **config sections)``.

    Brings up a lab of :data:`XGFT` that runs *jobs* and an agent on it in enforce mode;
    with *start*, starts the agent and waits until the jobs' SLs are in force and their
    measured classes too.  Every agent still running at the end gets SIGTERM and must exit 0.
    """
    guards: list[Guard] = []

    def factory(
        *jobs: dict[str, Any],
        lab_options: dict[str, str] | None = None,
        start: bool = True,
        **extra: Any,
    ) -> Guard:
        lab = make_lab(XGFT, opensm_options=QUIET | (lab_options or {}))
        write_jobs(lab, *jobs)
        guard = Guard(lab, tmp_path, **extra)
        guards.append(guard)
        if start:
            guard.start()
            guard.steady(*(j["id"] for j in jobs))
        return guard

    yield factory
    for guard in guards:
        if guard.proc is not None and guard.proc.poll() is None:
            assert guard.stop() == 0
