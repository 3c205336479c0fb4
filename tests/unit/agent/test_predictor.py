"""The agent's predictor: profiles give phases, and profiles keep them on disk."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import yaml

from ibqos.agent import predictor as predictor_module
from ibqos.agent.predictor import make_refiner, profile_phases, routed_network
from ibqos.characterize.command import model_of_job
from ibqos.classify.prior import Priors
from ibqos.classify.profiles import ProfileStore, load_profile
from ibqos.config.tuning import TuningConfig
from ibqos.errors import ProfileError
from ibqos.fabric.lfts import read_lft_dump
from ibqos.fabric.model import fabric_from_file
from ibqos.jobs.model import Job
from ibqos.plan.setups import Setup
from ibqos.plan.tuning import Predicted
from ibqos.sim.estimate import Phases
from ibqos.sim.learn import Learnt
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


def test_the_refiner_records_what_it_learnt_in_the_profiles(tmp_path, monkeypatch) -> None:
    calls = []

    def fake_refine(net, jobs, decision, plan, observations, **kw):
        calls.append(kw)
        learnt = Learnt({"1": Phases(0.3, 0.05)}, 0.2, 0.1, 3)
        return Predicted((), {}, error=learnt.doc()), learnt

    monkeypatch.setattr(predictor_module, "refine", fake_refine)
    fabric = fabric_from_file(LAB / "ibnetdiscover.txt")
    jobs = [Job("1", ("a", "b"), name="newapp", pattern="ring")]
    plan = SimpleNamespace(job_cls={"1": "high"})
    cfg = TuningConfig(search_budget_s=4.0)
    for priors in (None, Priors(ProfileStore(tmp_path))):
        refiner = make_refiner(cfg, lambda: fabric, lambda: jobs, lambda p=priors: p)
        out = refiner(None, plan, Setup("x", ((1,),), (1.0,)), [])
        assert out.error == {"before": 0.2, "after": 0.1, "trials": 3}
    # half the budget fits the jobs, half searches; nothing known without profiles
    assert calls[0]["learn_budget_s"] == 2.0 and calls[0]["budget"].seconds == 2.0
    assert calls[0]["known"] == set()
    store = Priors(ProfileStore(tmp_path))
    assert profile_phases(jobs, store) == {"1": Phases(0.3, 0.05)}
    assert len(list(tmp_path.glob("*.yaml"))) == 1  # without profiles nothing is written
