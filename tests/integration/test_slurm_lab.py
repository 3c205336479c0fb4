"""ibqos with a real Slurm: munged, slurmctld and one slurmd per lab host, on this machine.

The agent runs as an admin would run it (a process attached to the lab, jobs from squeue,
the shipped PrologSlurmctld/EpilogSlurmctld, Prolog/Epilog and TaskProlog scripts wired into
slurm.conf);
the test submits jobs with sbatch and reads back what the SA serves and what the job's
tasks saw in their environment.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ibqos.lab.slurm import SlurmCluster
from tests.integration.labcheck import QUIET
from tests.support.agentrun import drive, lids, path_sl, start_agent, state

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "slurm"
IBQOS = str(Path(sys.executable).parent / "ibqos")
NODES = [f"cn{i:04d}" for i in range(1, 9)]  # the hosts of the "2;4,2;1,2" lab
ENV_NAMES = ("UCX_IB_SL", "NCCL_IB_SL", "OMPI_MCA_btl_openib_ib_service_level")
ENV_NAMES += ("MV2_DEFAULT_SERVICE_LEVEL",)
# the batch step and one srun task per node write what they got from the TaskProlog
JOB = f"""#!/bin/sh
env | grep -E '^({"|".join(ENV_NAMES)})=' > env.$SLURM_JOB_ID.batch
srun sh -c 'env | grep -E "^UCX_IB_SL=" > env.$SLURM_JOB_ID.task.$SLURM_NODEID'
sleep 300
"""


def wrapper(base: Path, script: str, **settings: str) -> Path:
    """The shipped *script*, run with these settings (slurmctld gives its scripts no
    environment of their own; a site puts them in /etc/default/ibqos-slurm)."""
    env_file = base / f"{script}.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    path = base / f"{script}.wrapper"
    path.write_text(f"#!/bin/sh\nIBQOS_SLURM_ENV={env_file} exec {CONTRIB / script}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def slurm_lab(make_lab, tmp_path):
    """A lab, and a Slurm cluster of its hosts with ibqos's scripts in slurm.conf.

    The Prolog asks the agent over TCP (``agent.sl_listen``), as compute nodes without
    ibqos do, and leaves the answer in ``tmp_path/slrun`` for the TaskProlog;
    PrologSlurmctld/EpilogSlurmctld drop notifications into *notify*.
    """
    yield from _slurm_lab(make_lab, tmp_path)


@pytest.fixture
def het_slurm_lab(make_lab, tmp_path):
    """:func:`slurm_lab` where heterogeneous jobs run (they need sched/backfill and a
    cons_tres selection), and where each node has its own answer directory
    (``tmp_path/slrun/NODE``), as compute nodes do: the lab's slurmds share one host."""
    options = {
        "SelectType": "select/cons_tres",  # given twice: the last one counts
        "SelectTypeParameters": "CR_Core",
        "SchedulerType": "sched/backfill",
        "SchedulerParameters": "bf_interval=1",
    }
    yield from _slurm_lab(make_lab, tmp_path, options, str(tmp_path / "slrun/$SLURMD_NODENAME"))


def _slurm_lab(make_lab, tmp_path, options=None, sl_dir=None):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    notify = tmp_path / "notify"
    notify.mkdir()
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    sl_port = _free_port()
    ctld = wrapper(tmp_path, "ibqos-slurmctld", IBQOS_NOTIFY_DIR=str(notify))
    asking = {
        "IBQOS_SL_SERVER": f"127.0.0.1:{sl_port}",
        "IBQOS_SL_TIMEOUT": "3",
        "IBQOS_SL_DIR": sl_dir or str(tmp_path / "slrun"),
    }
    task = wrapper(tmp_path, "ibqos-taskprolog", IBQOS_TEXTFILE_DIR=str(textfile), **asking)
    node = wrapper(tmp_path, "ibqos-prolog", **asking)
    scripts = {"PrologSlurmctld": ctld, "EpilogSlurmctld": ctld, "TaskProlog": task}
    scripts |= {"Prolog": node, "Epilog": node}
    with SlurmCluster(NODES, scripts=scripts, options=options) as cluster:
        cluster.start()
        yield lab, cluster, sl_port


def slurm_config(lab, cluster, tmp_path: Path, sl_port: int, **slurm: object) -> Path:
    """The lab's agent config with jobs from the cluster's squeue."""
    doc = yaml.safe_load(lab.paths.config.read_text())
    doc |= {
        "tuning": {"enabled": False},  # trials would add reloads to what is checked
        "jobs": {"source": "slurm"},
        "slurm": {
            "conf": str(cluster.conf),
            "poll_s": 1.0,
            "grace_s": 300,
            "notify_dir": str(tmp_path / "notify"),
        }
        | slurm,
        "collect": {"interval_s": 1.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 2.0, "min_interval_s": 0.0},
        "agent": {
            "state_dir": str(tmp_path / "state"),
            "job_poll_s": 0.2,
            "socket": str(cluster.base / "ibqos.sock"),  # short: UNIX socket paths are
            "sl_listen": f"127.0.0.1:{sl_port}",  # limited to 108 bytes
        },
        "metrics": {"listen": "127.0.0.1:0"},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_sl(cluster, job_id: str, timeout: float = 5.0) -> subprocess.CompletedProcess[str]:
    """``ibqos job-sl`` as a user (or a TaskProlog on the agent's host) runs it."""
    sock = str(cluster.base / "ibqos.sock")
    argv = [IBQOS, "job-sl", "--socket", sock, "--timeout", str(timeout), job_id]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def running(cluster, job_id: str) -> bool:
    return cluster.state(job_id) == "RUNNING"


def test_a_slurm_job_gets_its_sl_from_the_sa_and_in_its_tasks(slurm_lab, tmp_path):
    lab, cluster, sl_port = slurm_lab
    # polls far apart: only the PrologSlurmctld notification makes the agent prompt
    config = slurm_config(lab, cluster, tmp_path, sl_port, poll_s=60.0)
    lid = lids(lab)
    proc = start_agent(lab, config, tmp_path)
    try:
        drive(lab, lambda: state(tmp_path).get("updated_s", 0) > 0, 30, proc)
        job = cluster.sbatch(JOB, "-N2", "--nodelist=cn0001,cn0005", "-J", "ring")
        drive(lab, lambda: running(cluster, job), 30, proc)
        t_run = time.monotonic()
        drive(lab, lambda: job in state(tmp_path).get("job_sl", {}), 10, proc)
        seen = time.monotonic() - t_run
        print(f"job running -> SL assigned: {seen:.2f} s")
        assert seen < 1.0 + 0.5  # within one cycle (collect.interval_s 1 s), poll_s 60 s
        sl = state(tmp_path)["job_sl"][job]
        assert sl != 0
        # the SA serves it between a pair of the job's nodes (on two leaf switches)
        drive(lab, lambda: path_sl(lab, lid["cn0001"], lid["cn0005"]) == sl, 10, proc)
        # and its tasks got it from the TaskProlog: the batch step and one task per node
        out = cluster.jobs_dir
        files = [out / f"env.{job}.batch", out / f"env.{job}.task.0", out / f"env.{job}.task.1"]
        drive(lab, lambda: all(f.exists() and f.read_text() for f in files), 20, proc)
        batch = dict(line.split("=", 1) for line in files[0].read_text().split())
        assert batch == {name: str(sl) for name in ENV_NAMES}
        for task in files[1:]:
            assert task.read_text().strip() == f"UCX_IB_SL={sl}"
        # the Prolog asked (the lab's slurmds share one host, so one answer file)
        assert (tmp_path / "slrun" / f"sl.{job}").read_text() == f"{sl}\n"
        # ibqos job-sl prints it; an unknown job is one line on stderr and exit 1
        done = job_sl(cluster, job)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{sl}\n", "")
        done = job_sl(cluster, "999999")
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == "ibqos: job-sl: job 999999 is not running (job source)\n"
        assert not (tmp_path / "textfile" / "ibqos_taskprolog.prom").exists()  # no miss

        # the job ends: its port-group and binding go at once (EpilogSlurmctld)
        assert f"ibqos_job_{job}" in lab.paths.opensm.policy.read_text()
        cluster.run(["scancel", job])
        t_end = time.monotonic()
        drive(lab, lambda: f"ibqos_job_{job}" not in lab.paths.opensm.policy.read_text(), 15, proc)
        print(f"scancel -> port-group gone: {time.monotonic() - t_end:.2f} s")
        drive(lab, lambda: not (tmp_path / "slrun" / f"sl.{job}").exists(), 15, proc)  # Epilog
        # the state is saved right after the apply
        drive(lab, lambda: job not in state(tmp_path)["job_sl"], 5, proc)
        assert path_sl(lab, lid["cn0001"], lid["cn0005"]) == 0
    finally:
        assert proc.stop() == 0
    log = (tmp_path / "agent.log").read_text()
    assert "ERROR" not in log, log[-3000:]


def test_slurmctld_down_keeps_jobs_and_sls_then_recovers(slurm_lab, tmp_path):
    lab, cluster, sl_port = slurm_lab
    grace = 6.0
    config = slurm_config(lab, cluster, tmp_path, sl_port, poll_s=0.5, grace_s=grace)
    lid = lids(lab)
    log = tmp_path / "agent.log"
    proc = start_agent(lab, config, tmp_path)
    try:
        a = cluster.sbatch("sleep 300\n", "-N2", "--nodelist=cn0001,cn0005", "-J", "a")
        b = cluster.sbatch("sleep 300\n", "-N2", "--nodelist=cn0002,cn0006", "-J", "b")
        drive(lab, lambda: {a, b} <= set(state(tmp_path).get("job_sl", {})), 30, proc)
        sls = dict(state(tmp_path)["job_sl"])
        drive(lab, lambda: path_sl(lab, lid["cn0002"], lid["cn0006"]) == sls[b], 10, proc)
        policy = lab.paths.opensm.policy.read_text()

        cluster.stop_controller()
        t0 = time.monotonic()
        # within the grace time: one warning, the same jobs, SLs and policy
        drive(lab, lambda: "keeping the last 2 jobs" in log.read_text(), 15, proc)
        assert state(tmp_path)["job_sl"] == sls
        assert job_sl(cluster, a).stdout == f"{sls[a]}\n"  # known jobs are still answered
        # past it: cycles fail (logged once), nothing is rewritten, nothing reshuffled
        drive(lab, lambda: f"failed for more than {grace:g} s" in log.read_text(), 30, proc)
        drive(lab, lambda: time.monotonic() - t0 > grace + 4, 30, proc)
        text = log.read_text()
        assert text.count("keeping the last 2 jobs") == 1, text[-3000:]
        assert text.count(f"failed for more than {grace:g} s") == 1, text[-3000:]
        assert state(tmp_path)["job_sl"] == sls
        assert lab.paths.opensm.policy.read_text() == policy
        assert path_sl(lab, lid["cn0001"], lid["cn0005"]) == sls[a]

        # slurmctld returns (its saved state keeps the jobs): same jobs, same SLs
        cluster.start_controller()
        drive(lab, lambda: "squeue answers again" in log.read_text(), 30, proc)
        c = cluster.sbatch("sleep 300\n", "-N2", "--nodelist=cn0003,cn0007", "-J", "c")
        # a restarted slurmctld schedules only once the slurmds have registered again,
        # which a loaded host can take long over: ibqos is timed from the job's start
        drive(lab, lambda: cluster.state(c) == "RUNNING", 120, proc)
        drive(lab, lambda: c in state(tmp_path).get("job_sl", {}), 30, proc)
        now = state(tmp_path)["job_sl"]
        assert {a: now[a], b: now[b]} == sls
        assert path_sl(lab, lid["cn0002"], lid["cn0006"]) == sls[b]
    finally:
        assert proc.stop() == 0


def test_without_ibqos_a_job_starts_on_the_default_sl_and_the_miss_is_counted(make_lab, tmp_path):
    # the TaskProlog's other way of asking: 'ibqos job-sl' on the agent's host
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    task = tmp_path / "ibqos-taskprolog.wrapper"  # written once the socket path is known
    with SlurmCluster(NODES[:2], scripts={"TaskProlog": task}) as cluster:
        wrapper(
            tmp_path,
            "ibqos-taskprolog",
            IBQOS_BIN=IBQOS,
            IBQOS_SOCKET=str(cluster.base / "ibqos.sock"),  # nobody answers there
            IBQOS_SL_TIMEOUT="2",
            IBQOS_TEXTFILE_DIR=str(textfile),
        )
        cluster.start()
        script = "#!/bin/sh\nenv | grep -c '^UCX_IB_SL=' > env.$SLURM_JOB_ID; true\n"
        t0 = time.monotonic()
        job = cluster.sbatch(script, "-N1", "-J", "nosl")
        out = cluster.jobs_dir / f"env.{job}"
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, cluster.run(["squeue"]).stdout
            time.sleep(0.2)
        print(f"sbatch -> job ran without ibqos: {time.monotonic() - t0:.2f} s")
        assert out.read_text().strip() == "0"  # it ran, with no SL exported
        prom = (textfile / "ibqos_taskprolog.prom").read_text()
        assert "ibqos_taskprolog_sl_misses_total 1\n" in prom
        # and the command says why, in one line, exit 1
        done = job_sl(cluster, job)
        assert done.returncode == 1
        assert re.fullmatch(
            r"ibqos: job-sl: ibqos is not running \(nothing answers on \S+\)[^\n]*\n", done.stderr
        )


# each component's tasks write what they got from the TaskProlog, by node
HET_JOB = """#!/bin/sh
srun --het-group=0,1 sh -c 'env | grep -E "^UCX_IB_SL=" > env.het.$SLURMD_NODENAME'
sleep 300
"""


def test_a_heterogeneous_jobs_components_each_get_their_sl(het_slurm_lab, tmp_path):
    """Each component of a heterogeneous job is a job of its own in squeue (its own
    job_id; ``%i`` says LEADER+OFFSET); its tasks have the leader's id in SLURM_JOB_ID on
    every node, and the TaskProlog finds their component by their node."""
    lab, cluster, sl_port = het_slurm_lab
    config = slurm_config(lab, cluster, tmp_path, sl_port)
    proc = start_agent(lab, config, tmp_path)
    try:
        drive(lab, lambda: state(tmp_path).get("updated_s", 0) > 0, 30, proc)
        leader = cluster.sbatch(
            HET_JOB, "-N1", "--nodelist=cn0001", ":", "-N1", "--nodelist=cn0005"
        )
        # squeue -j LEADER: a line per component
        drive(lab, lambda: cluster.state(leader).split() == ["RUNNING"] * 2, 60, proc)
        out = cluster.run(["squeue", "-h", "-o", "%i %A %N"]).stdout.split()
        rows = {out[i]: (out[i + 1], out[i + 2]) for i in range(0, len(out), 3)}
        assert rows[f"{leader}+0"] == (leader, "cn0001")
        other, node = rows[f"{leader}+1"]
        assert node == "cn0005" and other != leader
        sls = lambda: state(tmp_path).get("job_sl", {})  # noqa: E731
        drive(lab, lambda: leader in sls() and other in sls(), 15, proc)
        want = {"cn0001": sls()[leader], "cn0005": sls()[other]}
        files = {n: cluster.jobs_dir / f"env.het.{n}" for n in want}
        drive(lab, lambda: all(f.exists() and f.read_text() for f in files.values()), 20, proc)
        got = {n: f.read_text().strip() for n, f in files.items()}
        assert got == {n: f"UCX_IB_SL={sl}" for n, sl in want.items()}
        # each node's Prolog asked for its own component; no task had to ask again
        for n, job in (("cn0001", leader), ("cn0005", other)):
            assert (tmp_path / "slrun" / n / f"sl.{job}").read_text() == f"{want[n]}\n"
        asked = proc.samples().get(("ibqos_job_sl_requests_total", (("result", "ok"),)))
        assert asked == 2
        assert not (tmp_path / "textfile" / "ibqos_taskprolog.prom").exists()  # no miss
        cluster.run(["scancel", leader])
    finally:
        assert proc.stop() == 0
