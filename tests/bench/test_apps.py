"""The real applications' matrices: the recorded files, their parser, the folding onto
hosts and the jobs made of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.sim import apps
from ibqos.attribute.patterns import traffic_matrix
from ibqos.jobs.jobfile import load_jobs


@pytest.mark.parametrize("app", apps.APPS)
def test_every_recorded_file_parses_into_64_ranks(app: str) -> None:
    path = apps.APPS_DIR / f"{app}.pairs"
    pairs = apps.parse_pairs(path.read_text(), str(path))
    m = apps.load(app)
    assert m.shape == (apps.RANKS, apps.RANKS)
    assert len(pairs) == np.count_nonzero(m)  # one line per pair with bytes
    assert m.sum() == sum(n for _, _, n in pairs)
    assert not m.diagonal().any()
    # every rank sends and receives: a run at 64 ranks, not fewer
    assert (m.sum(axis=1) > 0).all() and (m.sum(axis=0) > 0).all()


def test_the_source_names_every_file() -> None:
    source = (apps.APPS_DIR / "SOURCE.md").read_text()
    assert "CNCA-CeNAT/comm-patterns-clustering" in source and "MIT" in source
    for app in apps.APPS:
        assert f"`{app}.pairs`" in source
        header = (apps.APPS_DIR / f"{app}.pairs").read_text().splitlines()[3]
        assert header.startswith("# ProxyApps/") and header[2:] in source


def test_cg_talks_to_few_peers_and_amg_to_many() -> None:
    """The files keep the applications' shapes: NPB CG exchanges with a handful of ranks,
    AMG2013 with almost every other one."""
    peers_cg = np.count_nonzero(apps.load("cg") > 1000, axis=1)
    peers_amg = np.count_nonzero(apps.load("amg2013"), axis=1)
    assert peers_cg.max() < 10
    assert peers_amg.mean() > 40


def test_the_parser_reads_comments_and_refuses_bad_lines() -> None:
    assert apps.parse_pairs("# head\n0 1 5  # tail\n\n2 0 7\n") == [(0, 1, 5), (2, 0, 7)]
    with pytest.raises(ValueError, match="x:2: expected"):
        apps.parse_pairs("0 1 5\n0 1\n", "x")
    with pytest.raises(ValueError, match="two ranks"):
        apps.parse_pairs("3 3 5\n")
    with pytest.raises(ValueError, match="two ranks"):
        apps.parse_pairs("0 1 -5\n")
    with pytest.raises(ValueError, match="given twice"):
        apps.rank_matrix([(0, 1, 5), (0, 1, 6)], 4)
    with pytest.raises(ValueError, match="below 4"):
        apps.rank_matrix([(0, 4, 5)], 4)


def test_folding_puts_consecutive_ranks_on_a_host_and_drops_their_bytes() -> None:
    m = np.zeros((8, 8))
    m[0, 1] = 5.0  # ranks 0 and 1 share host 0
    m[1, 2] = 7.0  # host 0 -> host 1
    m[7, 0] = 3.0  # host 3 -> host 0
    folded = apps.fold(m, 4)
    assert folded[0, 1] == 7.0 and folded[3, 0] == 3.0
    assert folded.sum() == 10.0 and not folded.diagonal().any()
    with pytest.raises(ValueError, match="divisor"):
        apps.fold(m, 3)


def test_an_app_job_is_a_matrix_job_a_job_file_accepts(tmp_path: Path) -> None:
    nodes = [f"cn{k:04d}" for k in (9, 1, 2, 3, 4, 5, 6, 7)]
    job = apps.app_job("a", "lulesh", nodes, 5e9, 0.5, 0.01)
    assert job.pattern == "matrix" and job.nodes[0] == "cn0001" and job.name == "lulesh"
    assert job.matrix is not None and len(job.matrix) == 8
    assert max(max(row) for row in job.matrix) == 1.0
    flows = traffic_matrix(job)
    assert np.allclose(flows.sum(axis=1), 5e9)  # each host sends the job's rate
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [apps.job_dict(job)]}))
    (loaded,) = load_jobs(path, traffic=True)
    assert loaded.matrix == job.matrix and loaded.nodes == job.nodes
