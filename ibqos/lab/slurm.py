"""A real Slurm cluster on this host, for tests and demos: munged, slurmctld, one slurmd per node.

Debian's ``slurmd`` runs as any configured node with ``-N NODENAME``; each node gets its own
port and ``NodeHostname=localhost``, so one host carries the whole cluster.  Node names are
the lab fabric's hosts (``cn0001``...), so Slurm's jobs land on the lab's ports.

Everything lives in a fresh short directory under /tmp (UNIX socket paths are limited to
108 bytes; a pytest temp path is too long for slurmd's step sockets): a munge key made for
this cluster, munged's socket, slurm.conf, state, spool and logs.  ``munged --force`` is
needed because /tmp is world-writable, which munged otherwise refuses for its socket.

Processes are started tied to this process (``setpriv --pdeathsig``) and ended by pid.  Job
steps (slurmstepd and the tasks) are daemons of their own, so :meth:`SlurmCluster.stop`
cancels every job first and waits for them; whatever still runs afterwards *from this
cluster* (a process holding a socket in its spool directory or working in its job
directory) is ended by pid, and the directory is removed.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ibqos.errors import LabError
from ibqos.lab import procs
from ibqos.tools import run_tool

__all__ = ["SlurmCluster"]

#: scheduling is event driven; these keep a test's job start and end within a few seconds
_SLURM_CONF = """\
ClusterName=ibqoslab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={base}/munge/munge.sock
CredType=cred/munge
SlurmUser={user}
SlurmdUser=root
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
MinJobAge=5
KillWait=2
InactiveLimit=0
MessageTimeout=5
"""


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback now (held open together, so they are distinct)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


class SlurmCluster:
    """A Slurm cluster of *nodes* on this host.

    Args:
        nodes: node names (the lab's host names).
        scripts: slurm.conf keys naming scripts, e.g. ``{"TaskProlog": path,
            "PrologSlurmctld": path, "EpilogSlurmctld": path}``.
        options: more slurm.conf lines (``key: value``).

    Attributes:
        base: the cluster's directory.
        conf: its slurm.conf.
        jobs_dir: working directory of the jobs submitted with :meth:`sbatch`.
    """

    def __init__(
        self,
        nodes: Sequence[str],
        *,
        scripts: Mapping[str, Path] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        for tool in ("munged", "mungekey", "slurmctld", "slurmd", "squeue", "sbatch"):
            if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin") is None:
                raise LabError(f"{tool}: not found (run 'make setup' to install Slurm and munge)")
        if not nodes:
            raise LabError("a Slurm cluster needs at least one node")
        self.nodes = tuple(nodes)
        self.base = Path(tempfile.mkdtemp(prefix="ibqos-slurm-", dir="/tmp"))
        self.base.chmod(0o755)  # munged and slurmd check the path to their sockets
        self.conf = self.base / "slurm.conf"
        self.jobs_dir = self.base / "jobs"
        self._munged: subprocess.Popen[bytes] | None = None
        self._ctld: subprocess.Popen[bytes] | None = None
        self._slurmd: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[object] = []
        try:
            self._write(scripts or {}, options or {})
        except OSError as err:
            shutil.rmtree(self.base, ignore_errors=True)
            raise LabError(f"slurm cluster: cannot write {self.base}") from err
        except LabError:
            shutil.rmtree(self.base, ignore_errors=True)
            raise

    # -- files ----------------------------------------------------------------------
    def _write(self, scripts: Mapping[str, Path], options: Mapping[str, str]) -> None:
        for sub in ("munge", "state", "spool", "run", "log", "jobs"):
            (self.base / sub).mkdir(mode=0o755)
        (self.base / "key").mkdir(mode=0o700)
        for node in self.nodes:
            (self.base / "spool" / node).mkdir()
        self.jobs_dir.chmod(0o777)  # jobs may run as any user
        made = run_tool(
            ["mungekey", "--create", f"--keyfile={self.base / 'key' / 'munge.key'}"],
            timeout_s=60,
            env=self._tool_env(),
        )
        if not made.ok:
            raise LabError(f"slurm cluster: {made.message()}")
        ports = _free_ports(len(self.nodes) + 1)
        self.ctld_port = ports[0]
        text = _SLURM_CONF.format(
            host=socket.gethostname().split(".")[0],
            ctld_port=ports[0],
            base=self.base,
            user=pwd.getpwuid(os.getuid()).pw_name,
        )
        for key, path in scripts.items():
            text += f"{key}={path}\n"
        for key, value in options.items():
            text += f"{key}={value}\n"
        for node, port in zip(self.nodes, ports[1:], strict=True):
            text += (
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port}"
                " CPUs=1 State=UNKNOWN\n"
            )
        text += "PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        self.conf.write_text(text)

    # -- processes ------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment for Slurm's commands (squeue, sbatch, ...) against this cluster."""
        env = self._tool_env()
        env["SLURM_CONF"] = str(self.conf)
        return env

    @staticmethod
    def _tool_env() -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.pop("LD_PRELOAD", None)  # a lab client's umad2sim is no use to Slurm
        path = env.get("PATH", os.defpath).split(os.pathsep)
        env["PATH"] = os.pathsep.join(
            [*path, *(d for d in ("/usr/sbin", "/sbin") if d not in path)]
        )
        return env

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        out = open(self.base / "log" / log_name, "ab")  # closed in stop()
        self._logs.append(out)
        return procs.spawn(argv, env=self.env(), cwd=self.base, stdout=out)

    def start(self, timeout: float = 60.0) -> None:
        """Start munged, slurmctld and the slurmds; return when every node is idle.

        Raises:
            LabError: a daemon did not start or the nodes did not register in time (the
                cluster is stopped again).
        """
        try:
            munge = self.base / "munge"
            self._munged = self._spawn(
                [
                    "munged",
                    "--foreground",
                    "--force",  # /tmp is world-writable: munged would refuse its socket
                    f"--socket={munge / 'munge.sock'}",
                    f"--key-file={self.base / 'key' / 'munge.key'}",
                    f"--log-file={munge / 'munged.log'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--seed-file={munge / 'munged.seed'}",
                ],
                "munged.out",
            )
            self._wait(lambda: (munge / "munge.sock").exists(), 10, "munged socket")
            self.start_controller()
            for node in self.nodes:
                self._slurmd[node] = self._spawn(
                    ["slurmd", "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}.out"
                )
            self._wait(self._all_idle, timeout, "all nodes idle")
        except (LabError, OSError, subprocess.SubprocessError) as err:
            log = procs.tail(self.base / "log" / "slurmctld.log")
            self.stop()
            raise LabError(f"slurm cluster did not start: {err}; slurmctld: {log}") from err

    def start_controller(self) -> None:
        """Start slurmctld (again); its saved state brings back the running jobs."""
        if self._ctld is not None and self._ctld.poll() is None:
            return
        self._ctld = self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld.out")
        self._wait(lambda: self.run(["squeue", "-h"]).returncode == 0, 30, "slurmctld answering")

    def stop_controller(self) -> None:
        """Stop slurmctld (SIGTERM, by pid): squeue fails until :meth:`start_controller`."""
        if self._ctld is not None:
            procs.stop_child(self._ctld, timeout=20)
            self._ctld = None

    def _all_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
        states = dict(zip(out[::2], out[1::2], strict=False))
        return all(states.get(node) == "idle" for node in self.nodes)

    @staticmethod
    def _wait(ready: object, timeout: float, what: str) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise LabError(f"slurm cluster: no {what} within {timeout:g} s")
            time.sleep(0.2)

    # -- commands -------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster and capture its output."""
        return procs.run_command(argv, env=self.env(), cwd=self.jobs_dir, timeout=timeout)

    def sbatch(self, script: str, *args: str) -> str:
        """Submit a batch script (text) with sbatch *args*; return the job id."""
        path = self.jobs_dir / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script if script.startswith("#!") else "#!/bin/sh\n" + script)
        done = self.run(["sbatch", "--parsable", f"--chdir={self.jobs_dir}", *args, str(path)])
        if done.returncode != 0:
            raise LabError(f"sbatch failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        """A job's state as squeue prints it ("" once it is gone)."""
        return self.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip()

    # -- the end --------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, end the daemons (by pid) and remove the cluster's directory."""
        if self._ctld is not None and self._ctld.poll() is None:
            self.run(["scancel", "--full", "--user", str(os.getuid())], timeout=20)
            try:
                self._wait(lambda: not self.run(["squeue", "-h"]).stdout.strip(), 20, "jobs gone")
            except LabError:
                pass  # what is left is ended by pid below
        for proc in [*self._slurmd.values(), self._ctld, self._munged]:
            if proc is not None:
                procs.stop_child(proc)
        self._slurmd, self._ctld, self._munged = {}, None, None
        for pid in self._strays():
            _end_pid(pid)
        for out in self._logs:
            out.close()  # type: ignore[attr-defined]
        self._logs = []
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _strays(self) -> list[int]:
        """Processes of this cluster still alive: they hold a UNIX socket in its spool
        directory (slurmstepd) or work in its directory (a job's tasks)."""
        base = str(self.base)
        inodes = set()
        try:
            for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) >= 8 and fields[7].startswith(base + "/"):
                    inodes.add(fields[6])
        except OSError:
            pass
        found = []
        me = os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                cwd = str((entry / "cwd").readlink())
                if cwd == base or cwd.startswith(base + "/"):
                    found.append(int(entry.name))
                    continue
                if inodes:
                    for fd in (entry / "fd").iterdir():
                        m = re.fullmatch(r"socket:\[(\d+)\]", str(fd.readlink()))
                        if m and m.group(1) in inodes:
                            found.append(int(entry.name))
                            break
            except OSError:
                continue  # gone, or not ours to read
        return found


def _end_pid(pid: int) -> None:
    """End one stray process by pid (identified with its start time, as procs does)."""
    start = procs.start_time(pid)
    if start is None:
        return
    try:
        procs.end(procs.ProcRef(pid, start), timeout=3)
    except LabError:
        os.kill(pid, signal.SIGKILL)
