"""ibqos.service's real behaviour on a lab: its ExecStart run as written, systemd's side
played by the test.

There is no systemd as PID 1 here, so the test does what it would: installs the unit with
``ibqos install``, reads ExecStart, Environment= and the EnvironmentFile from the installed
files (tests/support/systemdunit.py), starts that argv with a NOTIFY_SOCKET it listens on and the
WATCHDOG_USEC of the unit's WatchdogSec= (both only as the unit asks for them: a unit that
lost Type=notify or its watchdog fails here), runs ExecReload's command with $MAINPID, and
stops the service as ``KillMode=control-group`` does: SIGTERM to every process of the
service.  The watchdog is shortened by a drop-in, as a site would (systemctl edit).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ibqos.agent.state import load_state
from ibqos.opensm.check import check_file
from tests.integration.labcheck import QUIET
from tests.support.agentrun import JOB_B, JOB_C, LIGHT_A, lids, path_sl, write_jobs
from tests.support.systemdunit import (
    Systemd,
    Unit,
    exec_argv,
    install_force,
    parse_unit,
    seconds,
    unit_environment,
)

IBQOS = Path(sys.executable).parent / "ibqos"
ROOT = Path(__file__).parents[2]
#: WatchdogSec= of the test's drop-in (the shipped 2min would make the test take minutes)
WATCHDOG_S = 2.0


class Service:
    """The installed ibqos.service, started from its ExecStart line with its environment."""

    def __init__(self, lab, prefix: Path, tmp_path: Path) -> None:
        self.unit: Unit = parse_unit(prefix / "etc/systemd/system/ibqos.service")
        self.prefix = prefix
        self.lab = lab
        self.systemd = Systemd(tmp_path / "notify.sock")
        self.log_path = tmp_path / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, int] = {}  # pid -> start time of each process of the service

    @property
    def watchdog_s(self) -> float:
        return seconds(self.service.get("WatchdogSec", ["0"])[-1])

    @property
    def service(self) -> dict[str, list[str]]:
        return self.unit["Service"]

    def start(self) -> float:
        env = self.lab.env() | unit_environment(self.unit, self.prefix)
        # systemd.service(5): the socket for Type=notify or a NotifyAccess other than none;
        # systemd.exec(5): WATCHDOG_USEC when WatchdogSec= is set
        notify_access = self.service.get("NotifyAccess", ["none"])[-1]
        if self.service.get("Type", ["simple"])[-1] == "notify" or notify_access != "none":
            env["NOTIFY_SOCKET"] = str(self.systemd.path)
        if self.watchdog_s > 0:
            env["WATCHDOG_USEC"] = f"{self.watchdog_s * 1e6:.0f}"
        (argv,) = [exec_argv(line, env) for line in self.service["ExecStart"]]
        with open(self.log_path, "wb") as log:
            t0 = time.monotonic()
            # systemd sets WATCHDOG_PID to the main pid: the shell's $$ is that pid after exec
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"', "sh", *argv],
                env=env,
                cwd=self.lab.paths.run,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the unit's control group
            )
        return t0

    def alive(self) -> bool:
        self._track()
        return self.proc is not None and self.proc.poll() is None

    def _track(self) -> None:
        """Note the service's processes while its main process is unreaped (its process
        group id cannot be anyone else's then), to end exactly these if a test fails."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in group_members(self.proc.pid):
                started = start_time(pid)
                if started is not None:
                    self.seen.setdefault(pid, started)

    def reload(self) -> None:
        """ExecReload's command as written, with $MAINPID."""
        assert self.proc is not None
        env = {"MAINPID": str(self.proc.pid), "PATH": os.environ["PATH"]}
        for line in self.service["ExecReload"]:
            subprocess.run(exec_argv(line, env), check=True, env=env)

    def stop(self) -> tuple[int, float]:
        """SIGTERM to every process of the service; (exit status, seconds to exit)."""
        assert self.proc is not None
        self._track()
        t0 = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGTERM)  # the main process is not reaped yet
        code = self.proc.wait(timeout=seconds(self.service["TimeoutStopSec"][0]))
        return code, time.monotonic() - t0

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._track()
            self.proc.kill()  # only when a test failed midway
            self.proc.wait()
        # a child the agent left behind: by pid, and only the very process seen (same start
        # time), never by process group once the main process is reaped
        for pid, started in self.seen.items():
            if self.proc is not None and pid != self.proc.pid and start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.systemd.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def install(tmp_path: Path, config: Path) -> Path:
    """``ibqos install`` into a prefix, then /etc/default/ibqos edited as an admin would and
    the watchdog shortened in a drop-in."""
    prefix = tmp_path / "root"
    subprocess.run(
        [str(IBQOS), "install", "--prefix", str(prefix), *install_force(IBQOS, ROOT)],
        check=True,
        capture_output=True,
    )
    unit_path = prefix / "etc/systemd/system/ibqos.service"
    shipped = parse_unit(unit_path)["Service"]
    assert shipped.get("Type") == ["notify"], shipped.get("Type")
    assert shipped.get("NotifyAccess") == ["main"], shipped.get("NotifyAccess")
    assert seconds(shipped.get("WatchdogSec", ["0"])[-1]) > 0, "no WatchdogSec="
    drop_in = Path(f"{unit_path}.d/watchdog.conf")
    drop_in.write_text(f"[Service]\nWatchdogSec={WATCHDOG_S:g}s\n")
    env_file = prefix / "etc/default/ibqos"
    text = env_file.read_text().replace(
        "IBQOS_CONFIG=/etc/ibqos/ibqos.yaml", f"IBQOS_CONFIG={config}"
    )
    env_file.write_text(text)
    return prefix


def service_config(lab, tmp_path: Path, jobs: Path, mode: str, **opensm: object) -> Path:
    doc = yaml.safe_load(lab.paths.config.read_text())
    doc["mode"] = mode
    doc["jobs"]["path"] = str(jobs)  # the agent's own job file; the lab keeps its own
    doc["opensm"] |= opensm
    doc |= {
        "collect": {"interval_s": 1.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 2.0, "min_interval_s": 0.0},
        "agent": {"state_dir": str(tmp_path / "state"), "job_poll_s": 0.2, "socket": ""},
        "tuning": {"enabled": False},  # trials would add reloads to what is counted
        "metrics": {"listen": "127.0.0.1:0"},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def agent_jobs(path: Path, *jobs: dict) -> None:
    tmp = path.with_name(".jobs.tmp")
    tmp.write_text(yaml.safe_dump({"jobs": list(jobs)}))
    os.replace(tmp, path)


def start_time(pid: int) -> int | None:
    """The start time of process *pid* (clock ticks since boot), None if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def group_members(pgid: int) -> list[int]:
    """Live processes (zombies aside) of process group *pgid*."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def leftovers(*dirs: Path) -> list[Path]:
    """Temp files of an interrupted atomic write (``.<name>.tmp-<pid>-<thread>``)."""
    return [p for d in dirs if d.is_dir() for p in d.rglob(".*.tmp-*")]


def test_the_unit_notifies_reloads_into_enforce_and_stops_cleanly(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs: [\n")  # broken: the first cycles fail
    config = service_config(lab, tmp_path, jobs, "observe")
    osm = lab.paths.opensm
    before = (osm.conf.read_bytes(), osm.policy.read_bytes())
    sweeps = osm.log.read_text().count("SUBNET UP")
    svc = Service(lab, install(tmp_path, config), tmp_path)
    try:
        t0 = svc.start()
        systemd = svc.systemd
        # no READY while cycles fail; STATUS says why
        failed = systemd.wait("STATUS=observe: cycle failed, retrying: jobs:", t0, 30, svc.alive)
        time.sleep(2.5)  # two more ticks, still failing
        assert "READY=1" not in systemd.texts(), systemd.texts()
        # READY once a cycle succeeds, and only after the state of that cycle is written
        agent_jobs(jobs, LIGHT_A, JOB_B)
        fixed = time.monotonic()
        ready = systemd.wait("READY=1", t0, 15, svc.alive)
        state_file = tmp_path / "state" / "state.json"
        assert state_file.stat().st_mtime <= ready.wall
        status = systemd.texts("STATUS=", after=failed.t)[-1]
        assert status.startswith("STATUS=observe: cycle") and "2 jobs" in status, status
        assert "would change opensm.conf, qos-policy.conf" in status
        print(f"first failure at {failed.t - t0:.2f} s; READY {ready.t - fixed:.2f} s after fix")
        assert {m.pid for m in systemd.messages} == {svc.proc.pid}  # NotifyAccess=main holds
        state = load_state(tmp_path / "state")
        assert state.mode == "observe" and set(state.job_sl) == {"A", "B"}

        # observe: OpenSM's files untouched, never signalled; the diff is kept
        assert (osm.conf.read_bytes(), osm.policy.read_bytes()) == before
        assert osm.log.read_text().count("SUBNET UP") == sweeps
        diff = (tmp_path / "state/observe/proposed.diff").read_text()
        assert "+# BEGIN ibqos managed keys" in diff and "ibqos_job_A" in diff

        # the watchdog: pings at half of WATCHDOG_USEC (the unit's), from the main process
        watchdog = svc.watchdog_s
        assert watchdog == WATCHDOG_S  # the drop-in's
        time.sleep(5.0)
        pings = systemd.pings(ready.t)
        gaps = sorted(b - a for a, b in itertools.pairwise(pings))
        print(f"watchdog: {len(pings)} pings, gaps {gaps[0]:.2f}-{gaps[-1]:.2f} s")
        assert len(gaps) >= 3 and watchdog / 2 - 0.05 <= gaps[len(gaps) // 2] <= 1.3
        assert gaps[-1] < watchdog

        # ExecReload's signal: the config is re-read, observe -> enforce at once
        config.write_text(config.read_text().replace("mode: observe", "mode: enforce"))
        t_reload = time.monotonic()
        svc.reload()
        systemd.wait("RELOADING=1", t_reload, 10, svc.alive)
        done = systemd.wait("READY=1", t_reload, 30, svc.alive)
        assert "enforce: cycle" in systemd.texts("STATUS=", after=t_reload)[-1]
        print(f"reload into enforce: READY again after {done.t - t_reload:.2f} s")
        assert "ibqos_job_A" in osm.policy.read_text()  # applied with the reload
        assert "# BEGIN ibqos managed keys" in osm.conf.read_text()
        lid = lids(lab)
        sl_a = load_state(tmp_path / "state").job_sl["A"]
        assert path_sl(lab, lid["cn0001"], lid["cn0006"]) == sl_a  # OpenSM serves it
        assert "SIGHUP: mode observe -> enforce" in svc.log()

        # a loop that hangs (a job file on a stuck file system: a FIFO nobody writes)
        # stops the pings although the process and its threads live on
        fifo = tmp_path / "stuck.yaml"
        os.mkfifo(fifo)
        os.link(fifo, tmp_path / ".stuck.tmp")
        os.replace(tmp_path / ".stuck.tmp", jobs)  # *fifo* still names it, to answer below
        time.sleep(0.5)
        hung = time.monotonic()
        time.sleep(1.5 * watchdog)
        assert svc.alive()
        assert systemd.pings(hung) == [], "pings went on while the loop hung"
        # The file system answers again: the job file is a regular file before the blocked
        # read gets its bytes.  A FIFO answers one read only, and the write changes its
        # mtime, so a reader that looks again (the file changed during the read) would
        # block on it for good, which no real file system does.
        agent_jobs(jobs, LIGHT_A, JOB_B)
        # non-blocking: ENXIO, not a hung test, if no one is reading it
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(writer, yaml.safe_dump({"jobs": [LIGHT_A, JOB_B]}).encode())
        os.close(writer)
        released = time.monotonic()
        resumed = systemd.wait("WATCHDOG=1", released, watchdog, svc.alive)
        silent, back = resumed.t - hung + 0.5, resumed.t - released
        print(f"hang: no ping for {silent:.1f} s; pinging again {back:.2f} s after")

        # SIGTERM in the middle of an apply (the reload command takes 2 s), sent to every
        # process of the service: stops within TimeoutStopSec, no partial file anywhere
        slow = f"sleep 2; kill -HUP $(cat {osm.pid})"
        doc = yaml.safe_load(config.read_text())
        doc["opensm"] |= {"pid_file": None, "reload_command": ["sh", "-c", slow]}
        config.write_text(yaml.safe_dump(doc))
        t_reload = time.monotonic()
        svc.reload()
        systemd.wait("READY=1", t_reload, 30, svc.alive)
        agent_jobs(jobs, LIGHT_A, JOB_B, JOB_C)
        pid = svc.proc.pid
        deadline = time.monotonic() + 15
        # the new policy is written and the reload command runs: OpenSM not told yet
        while "ibqos_job_C" not in osm.policy.read_text() or len(group_members(pid)) < 2:
            assert time.monotonic() < deadline, svc.log()[-2000:]
            time.sleep(0.02)
        code, took = svc.stop()
        assert code == 0, svc.log()[-2000:]
        print(f"SIGTERM mid-apply: exit {code} after {took:.2f} s")
        assert "cycle failed: apply: sh -c sleep 2" in svc.log(), svc.log()[-2000:]
        # OpenSM might have read the new files: it is told to read the previous ones
        assert "signalled OpenSM again: it reads the previous files" in svc.log()
        assert "STOPPING=1" in systemd.texts()
        assert took < seconds(svc.service["TimeoutStopSec"][0])
        assert group_members(svc.proc.pid) == [], "a process of the service outlived it"
    finally:
        svc.close()
    assert leftovers(osm.conf.parent, osm.policy.parent, tmp_path / "state") == []
    for path in (osm.conf, osm.policy):  # each file whole: the old version or the new
        assert [f for f in check_file(path, data_vls=8) if f.severity == "error"] == []
    # the interrupted apply put the previous files back and OpenSM re-read them: OpenSM's
    # view and the disk agree
    assert "ibqos_job_C" not in osm.policy.read_text()
    assert "ibqos_job_A" in osm.policy.read_text()
    load_state(tmp_path / "state")  # whole and readable


def test_restore_gives_opensm_its_first_files_back(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    jobs = tmp_path / "jobs.yaml"
    agent_jobs(jobs, LIGHT_A, JOB_B)
    config = service_config(lab, tmp_path, jobs, "enforce")
    osm = lab.paths.opensm
    first = (osm.conf.read_bytes(), osm.policy.read_bytes())
    lid = lids(lab)
    svc = Service(lab, install(tmp_path, config), tmp_path)

    def ibqos(*args: str) -> subprocess.CompletedProcess[str]:
        return lab.run([str(IBQOS), *args, "--config", str(config)])

    try:
        t0 = svc.start()
        ready = svc.systemd.wait("READY=1", t0, 60, svc.alive)
        print(f"enforce: READY {ready.t - t0:.2f} s after the start")
        assert "ibqos_job_A" in osm.policy.read_text()  # applied before READY
        sl_a = load_state(tmp_path / "state").job_sl["A"]
        assert path_sl(lab, lid["cn0001"], lid["cn0006"]) == sl_a
        # an enforcing agent would undo the restore at once: refused, nothing touched
        refused = ibqos("restore")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1 and refused.stderr.startswith(
            f"ibqos: apply: an ibqos agent in enforce mode runs on {tmp_path / 'state'}"
            f" (pid {svc.proc.pid})"
        ), refused.stderr
        assert "ibqos_job_A" in osm.policy.read_text()
        assert svc.stop()[0] == 0
    finally:
        svc.close()

    applied = (osm.conf.read_bytes(), osm.policy.read_bytes())
    # OpenSM rejects the restored files once: the restore is rolled back, exit 1
    mark = tmp_path / "broken-once"
    script = (
        f'if [ ! -e {mark} ]; then touch {mark}; printf "port-groups\\n" >> {osm.policy}; fi;'
        f" kill -HUP $(cat {osm.pid})"
    )
    doc = yaml.safe_load(config.read_text())
    doc["opensm"] |= {"pid_file": None, "reload_command": ["sh", "-c", script]}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(doc))
    out = lab.run([str(IBQOS), "restore", "--config", str(broken)])
    assert out.returncode == 1 and "ibqos: apply: restore failed, rolled back" in out.stderr
    assert "ERR AC0" in out.stderr, out.stderr[-1500:]
    assert (osm.conf.read_bytes(), osm.policy.read_bytes()) == applied

    sweeps = osm.log.read_text().count("SUBNET UP")
    out = ibqos("restore")
    assert out.returncode == 0, out.stderr
    assert f"restored {osm.conf}" in out.stdout and "OpenSM: applied" in out.stdout
    assert (osm.conf.read_bytes(), osm.policy.read_bytes()) == first  # byte for byte
    assert osm.log.read_text().count("SUBNET UP") > sweeps  # OpenSM re-read them
    assert path_sl(lab, lid["cn0001"], lid["cn0006"]) == 0  # the default SL again
    status = ibqos("status").stdout
    assert "last apply: restored the files without ibqos's lines (ibqos restore)" in status
    again = ibqos("restore")
    assert again.returncode == 0 and "nothing to restore" in again.stdout
