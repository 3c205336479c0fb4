"""The shipped Prolog/Epilog and TaskProlog, run as slurmd would run them, against a real
SL server on loopback: one question per node, the answer left for the node's tasks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibqos.agent.handoff import SlBoard, SlServer
from tests.support.paths import ROOT

CONTRIB = ROOT / "contrib" / "slurm"
EXPORTS = (
    "export UCX_IB_SL={sl}\nexport NCCL_IB_SL={sl}\n"
    "export OMPI_MCA_btl_openib_ib_service_level={sl}\nexport MV2_DEFAULT_SERVICE_LEVEL={sl}\n"
)


@pytest.fixture
def agent(tmp_path):
    board = SlBoard()
    board.publish({"4242": 5}, ["4242", "77"], planned=["77"])
    board.round_done(time.monotonic() + 3600)
    server = SlServer(board, None, ("127.0.0.1", 0))
    yield board, server
    server.close()


def run(script: str, tmp_path: Path, server, job: str, context: str | None = None, **env):
    settings = tmp_path / "ibqos-slurm"
    host, port = server.tcp_address if server is not None else ("127.0.0.1", 1)
    settings.write_text(
        f"IBQOS_SL_SERVER={host}:{port}\nIBQOS_SL_TIMEOUT=0.5\n"
        f"IBQOS_SL_DIR={tmp_path / 'run'}\nIBQOS_TEXTFILE_DIR={tmp_path}\n"
    )
    environ = {"PATH": os.environ["PATH"], "IBQOS_SLURM_ENV": str(settings), **env}
    environ["SLURM_JOB_ID"] = job
    if context is not None:
        environ["SLURM_SCRIPT_CONTEXT"] = context
    return subprocess.run(
        [CONTRIB / script], env=environ, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_prolog_asks_once_and_the_tasks_read_its_answer(agent, tmp_path) -> None:
    board, server = agent
    prolog = run("ibqos-prolog", tmp_path, server, "4242", "prolog_slurmd")
    assert (prolog.returncode, prolog.stdout) == (0, "")
    assert (tmp_path / "run" / "sl.4242").read_text() == "5\n"
    assert oct((tmp_path / "run").stat().st_mode & 0o777) == "0o755"
    for _ in range(3):  # the node's tasks: no agent needed any more
        task = run("ibqos-taskprolog", tmp_path, None, "4242", "prolog_task")
        assert (task.returncode, task.stdout, task.stderr) == (0, EXPORTS.format(sl=5), "")
    assert board.counts["ok"] == 1  # one question for the node, not one per task
    epilog = run("ibqos-prolog", tmp_path, server, "4242", "epilog_slurmd")
    assert epilog.returncode == 0 and not (tmp_path / "run" / "sl.4242").exists()


def test_a_miss_of_the_prolog_starts_the_tasks_on_the_default_sl(agent, tmp_path) -> None:
    board, server = agent
    assert run("ibqos-prolog", tmp_path, server, "77", "prolog_slurmd").returncode == 0
    left = (tmp_path / "run" / "sl.77").read_text()
    assert left.startswith("miss PENDING the SL of job 77 is not in force yet (OpenSM has not")
    task = run("ibqos-taskprolog", tmp_path, server, "77")
    assert (task.returncode, task.stdout) == (0, "")
    assert task.stderr.startswith("ibqos-taskprolog: job 77: no SL from ibqos (PENDING the SL of")
    assert "asked by the Prolog); tasks start on the default SL\n" in task.stderr
    prom = (tmp_path / "ibqos_taskprolog.prom").read_text()
    assert "ibqos_taskprolog_sl_misses_total 1\n" in prom
    assert board.counts["pending"] == 1  # the task did not ask again


def test_without_the_prologs_answer_the_task_asks(agent, tmp_path) -> None:
    board, server = agent
    task = run("ibqos-taskprolog", tmp_path, server, "4242")
    assert (task.returncode, task.stdout) == (0, EXPORTS.format(sl=5))
    assert board.counts["ok"] == 1
    task = run("ibqos-taskprolog", tmp_path, server, "77")
    assert (task.returncode, task.stdout) == (0, "")
    assert "(PENDING the SL of job 77 is not in force yet" in task.stderr


def test_no_agent_the_prolog_leaves_a_miss_and_exits_0(tmp_path) -> None:
    prolog = run("ibqos-prolog", tmp_path, None, "5", "prolog_slurmd")
    assert prolog.returncode == 0
    assert (
        tmp_path / "run" / "sl.5"
    ).read_text() == "miss no answer from 127.0.0.1:1 within 0.5 s\n"


@pytest.mark.parametrize("script", ["ibqos-prolog", "ibqos-taskprolog"])
def test_not_a_slurm_job_nothing_happens(tmp_path, script) -> None:
    result = run(script, tmp_path, None, "", "prolog_slurmd")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not (tmp_path / "run").exists()


def test_without_a_server_the_prolog_runs_ibqos_job_sl(tmp_path) -> None:
    board = SlBoard()
    board.publish({"4242": 3}, ["4242"])
    board.round_done(time.monotonic() + 3600)
    server = SlServer(board, tmp_path / "a.sock")
    try:
        settings = tmp_path / "ibqos-slurm"
        settings.write_text(
            f"IBQOS_BIN={Path(sys.executable).parent / 'ibqos'}\n"
            f"IBQOS_SOCKET={tmp_path / 'a.sock'}\nIBQOS_SL_DIR={tmp_path / 'run'}\n"
        )
        env = {"PATH": os.environ["PATH"], "IBQOS_SLURM_ENV": str(settings)}
        env |= {"SLURM_JOB_ID": "4242", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
        if "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        prolog = subprocess.run(
            [CONTRIB / "ibqos-prolog"], env=env, capture_output=True, text=True, timeout=60
        )
        assert (prolog.returncode, prolog.stderr) == (0, "")
        assert (tmp_path / "run" / "sl.4242").read_text() == "3\n"
    finally:
        server.close()


#: What real Slurm (22.05.8, the Slurm lab: ``sbatch -N1 : -N1``, ``srun --het-group=0,1``)
#: set for a heterogeneous job of two components, job ids 1 (cn0001) and 2 (cn0002): in
#: the Prolog of each node SLURM_JOB_ID is the component's own id (and SLURM_HET_JOB_ID
#: the leader's); in every task, on either node, SLURM_JOB_ID is the leader's, 1.
HET_PROLOG = {
    "cn0001": {"SLURM_JOB_ID": "1", "SLURM_HET_JOB_ID": "1", "SLURMD_NODENAME": "cn0001"},
    "cn0002": {"SLURM_JOB_ID": "2", "SLURM_HET_JOB_ID": "1", "SLURMD_NODENAME": "cn0002"},
}
HET_TASK = {
    "SLURM_HET_SIZE": "2",
    "SLURM_JOBID": "1",
    "SLURM_JOB_ID_HET_GROUP_0": "1",
    "SLURM_JOB_ID_HET_GROUP_1": "2",
    "SLURM_JOB_NODELIST": "cn[0001-0002]",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "cn0001",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "cn0002",
    "SLURM_PACK_SIZE": "2",
}


@pytest.fixture
def het_agent():
    board = SlBoard()
    board.publish({"1": 5, "2": 6}, ["1", "2"])  # squeue: each component a job of its own
    board.round_done(time.monotonic() + 3600)
    server = SlServer(board, None, ("127.0.0.1", 0))
    yield board, server
    server.close()


@pytest.mark.parametrize("with_prolog", [True, False])
def test_a_heterogeneous_jobs_tasks_take_their_components_sl(
    het_agent, tmp_path, with_prolog
) -> None:
    board, server = het_agent
    for node, env in HET_PROLOG.items():
        (tmp_path / node).mkdir()
        if with_prolog:
            env = dict(env)
            job = env.pop("SLURM_JOB_ID")
            prolog = run("ibqos-prolog", tmp_path / node, server, job, "prolog_slurmd", **env)
            assert prolog.returncode == 0
    for node, sl in (("cn0001", 5), ("cn0002", 6)):
        env = HET_TASK | {"SLURMD_NODENAME": node}
        task = run("ibqos-taskprolog", tmp_path / node, server, "1", **env)
        assert (task.returncode, task.stdout, task.stderr) == (0, EXPORTS.format(sl=sl), "")
    assert board.counts["ok"] == 2  # once per node: by the Prolog, or by the task


def test_a_node_of_no_component_keeps_slurm_job_id(agent, tmp_path) -> None:
    _, server = agent
    env = HET_TASK | {"SLURM_JOB_NODELIST_HET_GROUP_1": "cn[0002-0003]"}
    task = run("ibqos-taskprolog", tmp_path, server, "4242", SLURMD_NODENAME="gpu01", **env)
    assert (task.returncode, task.stdout) == (0, EXPORTS.format(sl=5))
