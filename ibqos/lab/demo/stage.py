"""The demo's stage: what it runs (the lab, the agent, Prometheus), the commands it types,
and the views it prints (:mod:`ibqos.lab.demo` says what it shows).

:class:`Demo` holds what the demo started and takes it all down in :meth:`Demo.cleanup`;
:mod:`ibqos.lab.demo.story` tells the story on it.  The commands a user would type
(``ibqos lab up``, ``ibqos status``, ...) run as those commands and print what they
print, and so do the lab's diagnostics (``sminfo``, ``perfquery``, ``smpquery``), run
through ``ibqos lab run``; the agent runs through :mod:`ibqos.lab.agentrun`, attached to
the lab as ``ibqos lab run`` would attach it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ibqos.errors import LabError, PrometheusQueryError
from ibqos.fsio import atomic_write
from ibqos.lab import manage
from ibqos.lab.agentrun import AgentRun, agent_config, read_state, scrape
from ibqos.lab.demo import views
from ibqos.lab.files import LabPaths
from ibqos.lab.lab import Lab
from ibqos.lab.prometheus import PrometheusServer
from ibqos.tools import run_tool

NAME = "demo"
#: 4 leaf switches of 8 hosts, 2 spines
XGFT = "2;8,4;1,2"
#: files of the checkout the demo reads (it runs from the checkout's top)
EXAMPLE_JOBS = "examples/demo-jobs.yaml"
TRACE = "characterize/traces/stencil-trace.csv"
PROFILES = "characterize/profiles"
RULES = "dashboards/ibqos.rules.yml"
#: seconds a command of the demo may take (``ibqos lab up`` waits up to 150 s for the
#: subnet; a dry run predicts every setup of the mix)
COMMAND_TIMEOUT_S = 600.0
#: the rounds :func:`ibqos.lab.demo.story.play` plays
ROUNDS = 9
SPINE_PORT = 1  # a spine's port 1 goes down to leaf sw-L1-0001
UPLINK = 9  # leaf ports 1-8 go to hosts, 9-10 up to the spines
#: the lines of ``ibqos lab status`` shown: the lab, its processes, jobs and contention
STATUS_LINES = re.compile(r"^lab|pid [0-9]|jobs:|contention")


def agent_sections(profiles: Path) -> dict[str, dict[str, Any]]:
    """The agent's config over the lab's: short time constants, so changes show quickly.

    Args:
        profiles: the job profiles' directory (a copy of ``characterize/profiles``).
    """
    return {
        "profiles": {"dir": str(profiles)},  # characterize/profiles, copied
        "collect": {"interval_s": 5},  # a sweep every 5 s (default 10)
        "classify": {"tau_s": 10},  # intensity smoothed over ~10 s (default 60)
        "lanes": {"min_hold_s": 10, "min_interval_s": 0},  # class changes held 10 s (60/300)
        # a round of trials once the mix held 10 s (30); 2 sweeps per trial (3); the law
        # and the next 2 setups (3); the lab's counters come in lumps: a gain must clear
        # 3 % and two standard errors; the demo shows trials, so the prediction spares
        # none (predicted_slack 10)
        "tuning": {
            "settle_s": 10,
            "trial_sweeps": 2,
            "shortlist": 2,
            "margin": 0.03,
            "margin_sigmas": 2,
            "predicted_slack": 10,
        },
        "metrics": {"listen": "127.0.0.1:0", "fabric": "demo"},  # any free port, in the log
        # 6 reloads a minute (2): the demo's plan changes and trials come seconds apart
        "opensm": {"reload_budget": {"burst": 6, "per_minute": 6}},
    }


def host_lid(discovered: str, host: str) -> int:
    """The LID of *host*'s CA port in ``ibnetdiscover`` output (the first ``lid`` on the
    line after the CA's)."""
    for line, port in itertools.pairwise(discovered.splitlines()):
        fields = port.split()
        if line.startswith("Ca") and f'"{host} mlx5_0"' in line and "lid" in fields[:-1]:
            return int(fields[fields.index("lid") + 1])
    raise LabError(f"no CA of host {host} in the discovered fabric")


def switch_lid(discovered: str, switch: str) -> int:
    """The LID of *switch* (by node description) in ``ibnetdiscover`` output."""
    for line in discovered.splitlines():
        fields = line.split()
        if line.startswith("Switch") and f'"{switch}"' in line and "lid" in fields[:-1]:
            return int(fields[fields.index("lid") + 1])
    raise LabError(f"no switch {switch} in the discovered fabric")


def say(text: str) -> None:
    """A section's title."""
    print(f"\n== {text}")


def note(text: str) -> None:
    """What to look for: each line of *text*, indented."""
    for line in text.splitlines():
        print(f"   {line}")


def show(lines: Sequence[str]) -> None:
    """Print *lines* as they are."""
    for line in lines:
        print(line)


#: A condition on the plan in force: (job id -> its plan entry, the tuning state) -> bool.
PlanCondition = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


class Demo:
    """The demo's lab, agent and Prometheus, and what it keeps between rounds.

    Args:
        root: the labs' root (a fresh directory, removed at the end).
        round_s: seconds between two rounds.
    """

    def __init__(self, root: Path, round_s: float) -> None:
        self.root = root
        self.paths = LabPaths(root, NAME)
        self.round_s = round_s
        self.ibqos = str(Path(sys.executable).parent / "ibqos")  # this installation's
        self.t0 = time.monotonic()
        self.config = self.paths.dir / "agent.yaml"
        self.agent_log = self.paths.dir / "agent.log"
        self.state_dir = self.paths.dir / "agent"  # the lab config's agent.state_dir
        self.lab: Lab | None = None
        self.agent: AgentRun | None = None
        self.prom: PrometheusServer | None = None
        self.lab_metrics = ""  # the lab's metrics URL: each job's iterations per second
        self.lids: dict[str, int] = {}
        self.log_seen = 0  # lines of the agent's log shown so far
        self.before: views.Shares = {}  # the jobs' progress before the agent ran
        self.before_tuning: views.Shares = {}  # ... and before tuning's round
        self.round_no = 0
        self.round_start = 0.0

    def elapsed(self) -> int:
        """Whole seconds since the demo started."""
        return int(time.monotonic() - self.t0)

    # -- commands --------------------------------------------------------------------

    def command(self, *args: str, quiet: bool = False) -> str:
        """Run ``ibqos ARGS`` and return its output; its stderr is shown (unless
        *quiet*).  If it fails, what it printed is shown and the demo ends with its exit
        status, as a shell script would."""
        done = run_tool([self.ibqos, *args], timeout_s=COMMAND_TIMEOUT_S)
        if done.returncode is None:
            raise LabError(done.message())
        return _checked(done.returncode, done.stdout, done.stderr, quiet)

    def command_shown(self, *args: str) -> None:
        """Run ``ibqos ARGS`` and show its output."""
        print(self.command(*args), end="")

    def on_lab(self, argv: Sequence[str], host: str | None = None, quiet: bool = False) -> str:
        """Run ``ibqos lab run`` (a command attached to the lab, from *host*'s port) and
        return its output, as :meth:`command` does."""
        return self.command("lab", "run", NAME, *self._host(host), "--", *argv, quiet=quiet)

    @staticmethod
    def _host(host: str | None) -> list[str]:
        return [] if host is None else ["--host", host]

    def _lab(self) -> Lab:
        if self.lab is None:
            raise LabError(f"lab {NAME} is not up")
        return self.lab

    def _agent(self) -> AgentRun:
        if self.agent is None:
            raise LabError("the agent is not running")
        return self.agent

    # -- before the agent ------------------------------------------------------------

    def lab_up(self) -> None:
        """``ibqos lab up`` with the demo's jobs and fluid contention, and its status."""
        up = ("lab", "up", "--name", NAME, "--xgft", XGFT, "--jobs", EXAMPLE_JOBS)
        self.command_shown(*up, "--tick", "0.25", "--contention", "fluid")
        status = self.command("lab", "status", NAME)
        show([line for line in status.splitlines() if STATUS_LINES.search(line)])
        self.lab = Lab(self.paths)
        self.lab_metrics = str(manage.status(NAME, root=self.root)["metrics_url"])
        discovered = self.paths.discovered.read_text()
        self.lids = {h: host_lid(discovered, h) for h in ("cn0001", "cn0025", "cn0026")}
        self.lids |= {s: switch_lid(discovered, s) for s in ("sw-L1-0001", "sw-L2-0001")}

    def show_opensm(self) -> None:
        """OpenSM through the fabric (``sminfo``) and the last lines of note in its log."""
        print(self.on_lab(["sminfo"]), end="")
        log = self.paths.opensm.log.read_text(errors="replace").splitlines()
        show([line for line in log if re.search("MASTER|SUBNET UP|ftree", line)][-3:])

    def show_counters(self) -> None:
        """A host port's and a leaf uplink's PortXmitData, read twice 1.5 s apart."""
        ports = [
            ("cn0001", self.lids["cn0001"], 1),
            ("sw-L1-0001", self.lids["sw-L1-0001"], UPLINK),
        ]
        print(
            f"{'':<8} {'cn0001 port 1 (host, job 3001)':>38} "
            f"{f'sw-L1-0001 port {UPLINK} (uplink to a spine)':>38}"
        )
        prev_t, prev = time.time(), [self._xmit(*port) for port in ports]
        for i in (1, 2):
            time.sleep(1.5)
            t = time.time()
            words = [self._xmit(*port) for port in ports]
            line = f"read {i}  "
            for now, before in zip(words, prev, strict=True):
                gb = (now - before) * 4 / 1e9  # PortXmitData counts 4-byte words
                line += f" {now:>13} +{gb:5.2f} GB = {gb / (t - prev_t):5.2f} GB/s"
            print(line)
            prev_t, prev = t, words

    def _xmit(self, node: str, lid: int, port: int) -> int:
        """PortXmitData of a port (4-byte words), read with perfquery from its own node."""
        out = self.on_lab(["perfquery", "-x", str(lid), str(port)], host=node)
        line = next(line for line in out.splitlines() if line.startswith("PortXmitData"))
        return int(re.split(r"[.:]+", line)[1])

    def show_truth(self) -> None:
        show(views.truth_table(json.loads(self.paths.truth.read_text())))

    def show_ports(self) -> None:
        """The busiest ports of one sweep of every port (``ibqos collect``)."""
        argv = [self.ibqos, "collect", "--once", "--interval", "1", "--format", "csv"]
        show(views.busiest_ports(self.on_lab(argv, quiet=True)))

    def show_profiles(self) -> None:
        """The stencil trace's classes per placement (``ibqos characterize trace``), and
        the example profiles, copied for the agent (``ibqos characterize profiles``)."""
        placements = ("--placement", "contiguous", "--placement", "F1")
        trace = ("characterize", "trace", TRACE, "--xgft", XGFT, "--ranks-per-node", "4")
        lines = self.command(*trace, *placements).splitlines()
        end = next((i for i, line in enumerate(lines) if i and not line), len(lines))
        show(lines[: end + 1][:4])  # its first table, up to its blank line: 4 lines at most
        # the agent reads (and learns into) a copy: the checkout's example profiles stay
        profiles = self.paths.dir / "profiles"
        profiles.mkdir(parents=True, exist_ok=True)
        for path in sorted(Path(PROFILES).glob("*.yaml")):
            shutil.copy(path, profiles)
        self.command_shown("characterize", "profiles", "--profiles", str(profiles))

    def write_config(self) -> None:
        """The agent's config: the lab's, with :func:`agent_sections` merged in."""
        sections = agent_sections(self.paths.dir / "profiles")
        agent_config(self.paths.config, self.config, sections, sort_keys=False)

    def show_dry_run(self) -> None:
        """What the agent would write (``ibqos run --dry-run --once``), cut short."""
        dry = [self.ibqos, "run", "--config", str(self.config), "--dry-run", "--once"]
        argv = [self.ibqos, "lab", "run", NAME, "--", *dry]
        done = run_tool(argv, timeout_s=COMMAND_TIMEOUT_S)
        if done.returncode is None:
            raise LabError(done.message())
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(1)
        show(views.dry_run_excerpt(done.stdout))

    # -- the agent and Prometheus ----------------------------------------------------

    def start_agent(self) -> None:
        """``ibqos run`` attached to the lab, its log in the lab's ``agent.log``."""
        self.agent = AgentRun.on(self._lab(), self.config, self.agent_log).start()

    def stop_agent(self) -> int:
        """SIGTERM: the agent ends its cycle and exits (0); its exit status."""
        return self._agent().stop()

    def start_prometheus(self) -> None:
        """A real Prometheus scraping the agent every second, with ibqos's rules."""
        url = self._agent().wait_metrics_url()
        target = url.removeprefix("http://").removesuffix("/metrics")
        workdir = self.root / "prometheus"
        workdir.mkdir()
        prom = PrometheusServer(
            workdir,
            [target],
            scrape_interval=1.0,
            evaluation_interval=1.0,
            rule_files=[Path(RULES)],
        )
        self.prom = prom
        prom.start()
        note(f"Prometheus (pid {prom.pid}) on {prom.url} scrapes the agent's metrics on {url}")

    def stop_prometheus(self) -> None:
        if self.prom is not None:
            self.prom.stop()
            self.prom = None

    # -- rounds ----------------------------------------------------------------------

    def round(self, headline: str, text: str) -> None:
        """A round's headline, then what to look for."""
        self.round_no += 1
        self.round_start = time.monotonic()
        print("\n" + "-" * 90)
        print(f"round {self.round_no}/{ROUNDS}, demo time {self.elapsed()} s: {headline}")
        note(text)

    def settle(self, seconds: float | None = None) -> None:
        """Sleep until the round is *seconds* old (default: the round's length)."""
        age = time.monotonic() - self.round_start
        left = (self.round_s if seconds is None else seconds) - age
        if left > 0:
            time.sleep(left)

    def wait_plan(self, timeout_s: float, condition: PlanCondition) -> None:
        """Wait until *condition* holds for the plan in force, or *timeout_s* passed."""
        t0 = time.monotonic()
        state_file = self.state_dir / "state.json"
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                state = json.loads(state_file.read_text())
                plan, tuning = state["plan"], state.get("tuning") or {}
                if condition({j["id"]: j for j in plan["jobs"]}, tuning):
                    return
            if time.monotonic() - t0 > timeout_s:
                print(f"   (not there after {timeout_s:.0f} s; this is the state now)")
                return
            time.sleep(0.5)

    def report(self, ended: Sequence[str] = ()) -> None:
        """The agent's view: its log, its status, a switch, Prometheus, the jobs' progress
        (*ended*: jobs that ended this round, checked gone from the plan)."""
        self.show_log()
        print("ibqos status (from the agent's state directory):")
        note(self.command("status", "--config", str(self.config)))
        self.show_switch(ended)
        self.show_prometheus()
        self.show_progress()

    def show_log(self) -> None:
        """The agent's log lines since the last time."""
        lines = self._agent().log_text().splitlines()
        new, self.log_seen = lines[self.log_seen :], len(lines)
        show(views.log_since(new))

    def show_switch(self, ended: Sequence[str]) -> None:
        """What OpenSM programmed into a spine's port, read back, against the plan."""
        lid, port = str(self.lids["sw-L2-0001"]), str(SPINE_PORT)
        both = f"smpquery sl2vl {lid} {port} && echo ==== && smpquery vlarb {lid} {port}"
        sl2vl, vlarb = self.on_lab(["sh", "-c", both]).split("====\n")
        print(
            f"what OpenSM programmed, read back from spine sw-L2-0001 (LID {lid}), port {port} "
            "(to leaf sw-L1-0001):"
        )
        state = json.loads((self.state_dir / "state.json").read_text())
        policy = self.paths.opensm.policy.read_text()
        show(views.switch_check(sl2vl, vlarb, state, policy, ended))

    def show_prometheus(self) -> None:
        """What the Lanes and Jobs dashboards show now, queried from Prometheus."""
        prom = self.prom
        if prom is None:
            return

        def query(expr: str) -> list[dict[str, Any]]:
            try:
                return prom.query(expr)
            except PrometheusQueryError:
                return []

        show(views.prometheus_view(query))

    def show_progress(self, save: str = "") -> None:
        """How fast each job iterates, from the lab's metrics, beside its uncontended rate
        and the columns saved before.

        Args:
            save: "before" keeps this as the "before ibqos" column; "tuning" keeps it as
                the "before tuning" column, and shows nothing.
        """
        text = scrape(self.lab_metrics, timeout_s=5.0).decode()
        jobs = {str(j["id"]): j for j in yaml.safe_load(self.paths.jobs.read_text())["jobs"]}
        share, rate, vl = views.progress_shares(text, jobs)
        if save == "before":
            self.before = share
        if save == "tuning":
            self.before_tuning = share
            return
        columns = [("before ibqos", self.before), ("before tuning", self.before_tuning)]
        show(views.progress_table(share, rate, vl, jobs, columns))

    def show_path(self, job: str, src_host: str, dst_host: str) -> None:
        """PathRecord between two hosts as the SA serves it, polled until it carries the
        job's SL (15 s at most); time counts from the change of the job file (when the
        scheduler started the job)."""
        src, dst = self.lids[src_host], self.lids[dst_host]
        print(
            f"PathRecord {src_host} (LID {src}) -> {dst_host} (LID {dst}), from the SA "
            f"(saquery PR --slid {src} --dlid {dst}):"
        )
        argv = ["saquery", "PR", "--slid", str(src), "--dlid", str(dst)]
        t0 = self.paths.jobs.stat().st_mtime
        sl = served = None
        out = ""
        while time.time() - t0 < 15:
            state = read_state(self.state_dir)
            if state:
                sl = state["job_sl"].get(job)
            out = self._lab().run(argv).stdout
            served = views.path_sl(out)
            if sl is not None and served == sl:
                break
            time.sleep(0.1)
        elapsed = time.time() - t0
        show(views.path_record(out))
        if sl is not None and served == sl:
            print(f"   = job {job}'s SL {sl}, served {elapsed:.1f} s after the job file changed")
        else:
            print(
                f"   ! job {job}: planned SL {sl}, the SA serves SL {served} after {elapsed:.1f} s"
            )

    def edit_job(self, job: str, **changes: Any) -> None:
        """Change a job's entry in the lab's job file, in one step (a new phase)."""
        doc = yaml.safe_load(self.paths.jobs.read_text())
        for entry in doc["jobs"]:
            if entry["id"] == job:
                entry.update(changes)
        atomic_write(self.paths.jobs, yaml.safe_dump(doc, sort_keys=False))

    # -- the end ---------------------------------------------------------------------

    def cleanup(self) -> None:
        """Take down whatever still runs (the agent, Prometheus, the lab) and remove the
        labs' root; a step that fails is passed over, to take down the rest."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.agent is not None:
            with contextlib.suppress(LabError):
                self.agent.stop()
        self.stop_prometheus()
        if self.paths.dir.is_dir():
            done = run_tool([self.ibqos, "lab", "down", NAME], timeout_s=COMMAND_TIMEOUT_S)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
        shutil.rmtree(self.root, ignore_errors=True)


def _checked(returncode: int, stdout: str, stderr: str, quiet: bool) -> str:
    """The output of a command that ran; if it failed, show what it printed and end the
    demo with its exit status."""
    if returncode != 0:
        sys.stdout.write(stdout)
        sys.stderr.write(stderr)
        raise SystemExit(returncode)
    if not quiet:
        sys.stderr.write(stderr)
    return stdout
