"""The agent's predictor: profiles give phases, and profiles keep them on disk."""

from __future__ import annotations

import logging

import pytest
import yaml

from ibqos.agent.predictor import profile_phases, routed_network
from ibqos.characterize.command import model_of_job
from ibqos.classify.prior import Priors
from ibqos.classify.profiles import ProfileStore, load_profile
from ibqos.errors import ProfileError
from ibqos.fabric.lfts import read_lft_dump
from ibqos.fabric.model import fabric_from_file
from ibqos.jobs.model import Job
from ibqos.sim.estimate import Phases
from tests.support.paths import TESTS

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


LAB = TESTS / "data" / "lab-xgft-2_8.4_1.2"


def test_the_prediction_routes_over_opensm_s_tables_when_they_fit(caplog) -> None:
    topo = fabric_from_file(LAB / "ibnetdiscover.txt").topo
    tables = read_lft_dump((LAB / "opensm-lfts.dump").read_text())
    assert routed_network(topo, tables).lfts == tables
    dmodk = routed_network(topo, None).lfts
    assert dmodk != tables  # OpenSM's ftree spreads otherwise than D-mod-K here
    del tables[min(tables)]
    with caplog.at_level(logging.WARNING):
        assert routed_network(topo, tables).lfts == dmodk
    assert caplog.messages[0].startswith("tuning: no forwarding table for switch ")
    assert caplog.messages[0].endswith("; predicting over D-mod-K routes")
