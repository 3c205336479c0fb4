"""The agent's predictor: profiles give phases, and profiles keep them on disk."""

from __future__ import annotations

import pytest
import yaml

from ibqos.agent.predictor import profile_phases
from ibqos.characterize.command import model_of_job
from ibqos.classify.prior import Priors
from ibqos.classify.profiles import ProfileStore, load_profile
from ibqos.errors import ProfileError
from ibqos.jobs.model import Job
from ibqos.sim.estimate import Phases

PROFILE = {
    "version": 1,
    "application": "lammps",
    "expected_class": "moderate",
    "confidence": 1.0,
    "model": {"pattern": "halo", "rate_bytes_per_s": 4.0e9, "duty": 0.4, "period_s": 0.02},
}


def _store(tmp_path, doc) -> Priors:
    (tmp_path / "lammps.yaml").write_text(yaml.safe_dump(doc))
    return Priors(ProfileStore(tmp_path))


def test_a_profile_with_phases_gives_them_and_others_get_none(tmp_path) -> None:
    priors = _store(tmp_path, PROFILE)
    jobs = [Job("1", ("a", "b"), name="lammps"), Job("2", ("c", "d"), name="other")]
    assert profile_phases(jobs, priors) == {"1": Phases(0.4, 0.02)}
    assert profile_phases(jobs, None) == {}
    no_phases = PROFILE | {"model": {"pattern": "halo", "rate_bytes_per_s": 4.0e9}}
    (tmp_path / "lammps.yaml").unlink()
    assert profile_phases(jobs, _store(tmp_path, no_phases)) == {}


@pytest.mark.parametrize(
    ("model", "match"),
    [({"duty": 1.5}, "model.duty"), ({"period_s": 0}, "model.period_s")],
)
def test_bad_phases_are_refused(tmp_path, model, match) -> None:
    doc = PROFILE | {"model": {"pattern": "halo"} | model}
    path = tmp_path / "lammps.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match=match):
        load_profile(path)


def test_characterizing_a_lab_job_records_its_phases() -> None:
    job = Job("1", ("a", "b"), pattern="ring", rate_bytes_per_s=1e9, duty=0.3, period_s=0.05)
    model = model_of_job(job)
    assert (model.duty, model.period_s, model.rate_bytes_per_s) == (0.3, 0.05, 0.3e9)
    assert model_of_job(Job("2", ("a", "b"), pattern="ring")).duty is None
