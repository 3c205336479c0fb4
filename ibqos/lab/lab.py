"""A lab: one simulated fabric (ibsim + OpenSM + traffic model) in its own directory.

:class:`Lab` starts and stops the lab's processes and ticks its traffic model; its files
(the directory layout) are :mod:`ibqos.lab.files`, the counters it writes into ibsim
:mod:`ibqos.lab.counters`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ibqos.errors import LabError
from ibqos.fabric.routes import Router
from ibqos.fabric.topology import Port, Topology, parse_ibnetdiscover
from ibqos.fsio import atomic_write
from ibqos.jobs import jobfile as jobsmod
from ibqos.lab import counters, procs
from ibqos.lab.files import (
    LabPaths,
    check_name,
    check_speeds,
    default_root,
    hostnames,
    load_net,
    load_state,
    pick_sm,
    take_lids,
    wait_lft_dump,
    write_files,
    write_opensm,
)
from ibqos.lab.ibsim import LINK_COMMANDS, IbSim, client_env, set_links
from ibqos.lab.opensm import FAST_FAILOVER, OpenSM
from ibqos.lab.progress import WINDOW_S
from ibqos.lab.readback import OPENSM_DEFAULT, ReadBack, pick_probe
from ibqos.lab.traffic import CONTENTION_MODELS, TrafficModel

# the names other modules import from here, wherever they are defined
__all__ = [
    "READBACK_S",
    "Lab",
]

log = logging.getLogger(__name__)

#: seconds between two reads of the QoS setup from the fabric (fluid contention)
READBACK_S = 2.0


class Lab:
    """One lab, started and owned by this process (the CLI runs it in a supervisor).

    Use :meth:`create` to make a new lab directory, then :meth:`start`, :meth:`tick` and
    :meth:`stop` (or use it as a context manager, which stops and removes it).
    """

    def __init__(self, paths: LabPaths) -> None:
        self.paths = paths
        try:
            self.spec: dict[str, Any] = json.loads(paths.spec.read_text())
        except (OSError, ValueError) as err:
            raise LabError(f"lab {paths.name}: no lab at {paths.dir}") from err
        self.topo = load_net(paths.net)
        self.sm_node: str = self.spec["sm_node"]
        self.sockname: str = self.spec["sockname"]
        # labs made before the contention models existed ran the crude one
        self.contention: str = self.spec.get("contention", "crude")
        self.ibsim: IbSim | None = None
        self.opensm: OpenSM | None = None
        #: the lab's other OpenSMs by name, each on a host of its own (:meth:`add_opensm`)
        self.others: dict[str, OpenSM] = {}
        self.model: TrafficModel | None = None
        self.readback: ReadBack | None = None
        self._mix_changed = False
        #: the last truth written (what the metrics endpoint serves)
        self.last_truth: dict[str, Any] = {}
        self.written: dict[Port, tuple[int, ...]] = {}
        self.written_wait: dict[Port, dict[str, int]] = {}
        self.ticks = 0
        self.lines_last_tick = 0
        self._jobs_stamp: tuple[float, int] | None = None
        self.timings: dict[str, float] = {}

    # -- creation -------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        name: str,
        topo: Topology,
        *,
        root: Path | None = None,
        jobs: Path | None = None,
        sm_host: str | None = None,
        opensm_options: Mapping[str, str] | None = None,
        tick_s: float = 1.0,
        contention: str = "crude",
        readback_s: float = READBACK_S,
        progress_window_s: float = WINDOW_S,
    ) -> Lab:
        """Write a new lab directory (nothing is started yet).

        Args:
            contention: "crude" or "fluid" (:mod:`ibqos.lab.traffic`).
            readback_s: fluid: seconds between two reads of the QoS setup from the fabric.
            progress_window_s: seconds of lab time iterations per second are averaged over.

        Raises:
            LabError: the name is taken, the SM host is unknown, or a bad contention
                model or interval.
            TopologyError: the topology uses a link type ibsim cannot simulate.
            JobsError: the job file is invalid or names unknown hosts.
        """
        paths = LabPaths(root or default_root(), check_name(name))
        if paths.dir.exists():
            raise LabError(
                f"lab {name} already exists at {paths.dir} (stop it with 'ibqos lab down {name}')"
            )
        if contention not in CONTENTION_MODELS:
            raise LabError(
                f"contention {contention!r}: expected one of {', '.join(CONTENTION_MODELS)}"
            )
        if not readback_s > 0 or not progress_window_s > 0:
            raise LabError("the read-back interval and the progress window must be > 0 s")
        check_speeds(topo)
        sm_node = pick_sm(topo, sm_host)
        jobs_text = "jobs: []\n"
        if jobs is not None:
            parsed = jobsmod.load_jobs(jobs, traffic=True)
            jobsmod.check_hosts(parsed, hostnames(topo), str(jobs))
            jobs_text = jobsmod.dump_jobs(parsed)
        paths.dir.mkdir(parents=True)
        try:
            for d in (paths.run, paths.opensm.dir):
                d.mkdir()
            extra = {
                "contention": contention,
                "readback_s": readback_s,
                "progress_window_s": progress_window_s,
            }
            write_files(paths, topo, sm_node, jobs_text, opensm_options or {}, tick_s, extra)
        except BaseException:
            shutil.rmtree(paths.dir, ignore_errors=True)
            raise
        return cls(paths)

    # -- running --------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Start ibsim and OpenSM; return when the subnet is up and routes are loaded."""
        t0 = time.monotonic()
        ports = sum(n.nports + 1 for n in self.topo.nodes.values())
        limits = (len(self.topo.nodes) + 16, len(self.topo.switches()) + 16, ports + 64)
        self.ibsim = IbSim(
            self.paths.net, self.sockname, self.paths.run, self.paths.ibsim_log, limits
        )
        self._save_state("starting")
        try:
            self.ibsim.start()
            self._save_state("starting")
            self.timings["ibsim_s"] = time.monotonic() - t0
            self.opensm = OpenSM(self.paths.opensm, self.env(self.sm_node), self.paths.run)
            t1 = time.monotonic()
            self.opensm.spawn()
            self._save_state("starting")  # its pid, before the wait: 'lab down' may come
            self.opensm.wait_up(timeout)
            self.timings["opensm_s"] = time.monotonic() - t1
            self._save_state("starting")
            t1 = time.monotonic()
            self._discover()
            self.timings["discover_s"] = time.monotonic() - t1
            t1 = time.monotonic()
            self._clear_counters()
            self.timings["clear_s"] = time.monotonic() - t1
            self.timings["up_s"] = time.monotonic() - t0
            t1 = time.monotonic()
            self.reload_jobs()
            self.timings["jobs_s"] = time.monotonic() - t1
            if self.readback is not None:  # what OpenSM programmed, before the first tick
                t1 = time.monotonic()
                self._refresh_qos()
                self.timings["readback_s"] = time.monotonic() - t1
            self._save_state("up")
        except BaseException:
            self.stop("failed")
            raise

    def _discover(self) -> None:
        """Read LIDs (ibnetdiscover) and routes (OpenSM's LFT dump) from the running fabric."""
        text = self.run(["ibnetdiscover"], check=True).stdout
        atomic_write(self.paths.discovered, text)
        take_lids(self.topo, parse_ibnetdiscover(text, str(self.paths.discovered)))
        hosts: dict[str, list[Port]] = {}
        for ca in self.topo.cas():
            hosts.setdefault(ca.hostname, []).extend(self.topo.ports(ca.id))
        window = float(self.spec.get("progress_window_s", WINDOW_S))
        if self.contention == "fluid":
            # imported here: ibqos.sim.network imports ibqos.lab
            from ibqos.sim.network import Network

            net = Network(self.topo, self._lfts())
            self.model = TrafficModel(
                self.topo,
                net.router,
                hosts,
                network=net,
                arbitration=OPENSM_DEFAULT.arbitration(),
                window_s=window,
            )
            self.readback = ReadBack(
                self._diag,
                pick_probe(self.topo),
                float(self.spec.get("readback_s", READBACK_S)),
            )
        else:
            router = Router(self.topo, self._lfts())
            self.model = TrafficModel(self.topo, router, hosts, window_s=window)

    def _diag(self, argv: Sequence[str], host: str | None) -> str:
        """Run a diag for the read-back (:data:`ibqos.lab.readback.Runner`)."""
        return self.run(argv, host=host, check=True, timeout=10.0).stdout

    def _refresh_qos(self) -> None:
        """Fluid: re-read the QoS setup when due (at once after a mix change) and hand a
        changed one to the model."""
        assert self.readback is not None and self.model is not None
        pairs: dict[str, tuple[int, int] | None] = {}
        for jid, load in self.model.jobs.items():
            nodes = load.job.nodes
            pairs[jid] = None
            if len(nodes) >= 2:
                a, b = (self.model.hosts[h][0] for h in nodes[:2])
                pairs[jid] = (self.topo.lids[a], self.topo.lids[b])
        force, self._mix_changed = self._mix_changed, False
        if self.readback.poll(pairs, force=force):
            self.model.set_arbitration(self.readback.setup.arbitration())

    def _clear_counters(self) -> None:
        """Start every modelled counter from zero, as after a PerfMgr clear.

        Start-up management traffic (OpenSM's sweeps, ibnetdiscover) has moved the data
        counters of every link; ports no job uses would keep that forever, since the
        model only writes what changes.  Later MADs are real traffic and stay visible
        until the model next writes the port.
        """
        assert self.ibsim is not None and self.model is not None
        errors = self.ibsim.command(counters.clear_lines(self.model.router.ports))
        if errors:
            raise LabError(f"ibsim rejected clearing the counters: {errors[0]}")

    def _lfts(self, timeout: float = 30.0) -> dict[int, dict[int, int]]:
        """OpenSM's LFT dump, once it holds a table for every switch."""
        return wait_lft_dump(self.paths.opensm.lfts_dump, len(self.topo.switches()), timeout)

    def reload_jobs(self) -> bool:
        """Re-read jobs.yaml if it changed.  Returns True if the mix changed.

        Raises:
            JobsError: the file is invalid (the previous mix stays in force).
        """
        st = self.paths.jobs.stat()
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._jobs_stamp:
            return False
        parsed = jobsmod.load_jobs(self.paths.jobs, traffic=True)
        jobsmod.check_hosts(parsed, hostnames(self.topo), str(self.paths.jobs))
        self._jobs_stamp = stamp
        assert self.model is not None
        self.model.set_jobs(parsed)
        self._mix_changed = True
        return True

    def tick(self, dt: float) -> int:
        """Advance the traffic model by *dt* seconds and write changed counters into ibsim.

        Returns:
            the number of PerformanceSet lines written.
        """
        if self.model is None or self.ibsim is None:
            raise LabError(f"lab {self.paths.name} is not running")
        t0 = time.monotonic()
        if self.readback is not None:
            self._refresh_qos()
        t1 = time.monotonic()
        # fluid: the lanes are known (read back), so the wait is split over the VLs too
        self.model.tick(dt, vls=self.model.vls() if self.readback is not None else None)
        lines = counters.changed_lines(self.model, self.written, self.written_wait)
        t2 = time.monotonic()
        errors = self.ibsim.command(lines) if lines else []
        self.timings["tick_readback_s"] = t1 - t0
        self.timings["tick_model_s"] = t2 - t1
        self.timings["tick_write_s"] = time.monotonic() - t2
        if errors:
            raise LabError(f"ibsim rejected {len(errors)} PerformanceSet lines: {errors[0]}")
        self.ticks += 1
        self.lines_last_tick = len(lines)
        truth = self.truth()
        atomic_write(self.paths.truth, json.dumps(truth, indent=1) + "\n")
        self.last_truth = truth  # replaced whole: the metrics thread reads it as it is
        return len(lines)

    def truth(self) -> dict[str, Any]:
        """Ground truth of the lab now (:func:`ibqos.lab.counters.truth`)."""
        assert self.model is not None
        return counters.truth(self.model, self.readback, self.ticks, self.lines_last_tick)

    # -- OpenSM and links, for fault injection ----------------------------------------
    def stop_opensm(self, name: str | None = None) -> int | None:
        """End the lab's OpenSM (its own child process, by pid) and reap it; its exit status.

        ibsim, the ticks and the diags go on; SA queries fail until :meth:`start_opensm`
        (or until another OpenSM of the lab, standing by, takes over).

        Args:
            name: another OpenSM of the lab (:meth:`add_opensm`); None: the first one.

        Raises:
            LabError: the lab or that OpenSM is not running.
        """
        osm = self._opensm(name)
        if not osm.running:
            raise LabError(f"lab {self.paths.name}: OpenSM is not running ({osm.note})")
        code = osm.stop()
        log.info("lab %s: OpenSM %s", self.paths.name, osm.note)
        self._save_state(self._status())
        return code

    def start_opensm(
        self,
        timeout: float = 60.0,
        abort: Callable[[], bool] | None = None,
        *,
        name: str | None = None,
    ) -> float:
        """Start the lab's OpenSM again (same opensm.conf, pid file, log appended to,
        environment under umad2sim) and return once it logs MASTER and SUBNET UP (another
        OpenSM of the lab, *name*: once it is master or stands by).

        Args:
            timeout: seconds to wait for the subnet to come up.
            abort: polled while waiting; True gives up (the lab is being taken down).
            name: another OpenSM of the lab (:meth:`add_opensm`); None: the first one.

        Returns:
            seconds it took.

        Raises:
            LabError: OpenSM runs already, exited, or was not up within *timeout* (it is
                ended again); the message has its last log lines.
        """
        osm, t0 = self._opensm(name), time.monotonic()
        if osm.running:
            raise LabError(f"lab {self.paths.name}: OpenSM already runs (pid {osm.info()['pid']})")
        osm.spawn()
        self._save_state(self._status())  # its pid, before the wait: 'lab down' may come
        try:
            if name is None and not self.others:
                osm.wait_up(timeout, abort)
            else:  # beside another OpenSM it may stand by
                osm.wait_role(timeout=timeout, abort=abort)
        except LabError as err:
            osm.stop()
            osm.note = f"failed to start: {err}"
            raise LabError(f"lab {self.paths.name}: {err}") from err
        finally:
            self._save_state(self._status())
        log.info("lab %s: OpenSM up (pid %s)", self.paths.name, osm.info()["pid"])
        return time.monotonic() - t0

    def restart_opensm(
        self, timeout: float = 60.0, abort: Callable[[], bool] | None = None
    ) -> float:
        """:meth:`stop_opensm` (if it runs), then :meth:`start_opensm`."""
        if self._opensm().running:
            self.stop_opensm()
        return self.start_opensm(timeout, abort)

    def add_opensm(
        self,
        host: str,
        *,
        priority: int,
        name: str | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> OpenSM:
        """Start another OpenSM, on *host*, beside the lab's first one: a second subnet
        manager, as on a fabric with two SM hosts.

        It has a directory of its own under the lab (opensm.conf, policy, log, pid file,
        cache: :meth:`ibqos.lab.files.LabPaths.other_opensm`), starts from the options the
        lab was made with, then :data:`~ibqos.lab.opensm.FAST_FAILOVER`, then ``sm_priority``
        *priority*, then *options*; it is attached to *host*'s HCA through umad2sim
        (``SIM_HOST``).  Of two OpenSMs the one of higher priority (on a tie, the lower
        port GUID) is master, the other stands by; a standby takes over once the master has
        missed ``polling_retry_number`` polls.  The first OpenSM does not poll faster unless
        the lab was made with :data:`FAST_FAILOVER` in its options.

        Args:
            host: host name (or node id) of a CA other than the first OpenSM's.
            priority: its ``sm_priority`` (0-15).
            name: its name and directory (default ``opensm-<host>``).
            options: opensm.conf options over the others.
            timeout: seconds to wait until it is master (subnet up) or stands by.

        Returns:
            the OpenSM (stop it with ``stop_opensm(name)``; :meth:`stop` ends it too).

        Raises:
            LabError: the lab is not running, the host is the first OpenSM's or unknown,
                the name is taken, or it exited or settled in neither role in time.
        """
        if self.ibsim is None:
            raise LabError(f"lab {self.paths.name} is not running")
        node = self.resolve_node(host)
        if self.topo.nodes[node].kind == "switch":
            raise LabError(f"lab {self.paths.name}: {host} is a switch, OpenSM runs on a CA")
        if node == self.sm_node:
            raise LabError(f"lab {self.paths.name}: {host} runs the lab's first OpenSM")
        name = name or f"opensm-{self.topo.nodes[node].hostname}"
        files = self.paths.other_opensm(name)
        if name in self.others or files.dir.exists():
            raise LabError(f"lab {self.paths.name}: an OpenSM named {name} exists")
        values = dict(self.spec.get("opensm_options", {})) | FAST_FAILOVER
        values |= {"sm_priority": str(priority)} | dict(options or {})
        files.dir.mkdir()
        write_opensm(files, values, f"opensm.conf of OpenSM {name} of ibqos lab {self.paths.name}")
        osm = OpenSM(files, self.env(node), self.paths.run)
        self.others[name] = osm
        self.start_opensm(timeout, name=name)
        return osm

    def check_opensm(self) -> int | None:
        """Reap and record an OpenSM that exited on its own; its status if it just did."""
        code = self.opensm.reap() if self.opensm is not None else None
        if code is not None:
            self._save_state(self._status())
        return code

    def opensm_info(self) -> dict[str, Any]:
        """Whether OpenSM runs, its pid, and what last happened to it."""
        return self.opensm.info() if self.opensm else {"running": False, "pid": None, "note": ""}

    def link_down(self, node: str, port: int | None = None) -> str:
        """Take *node*'s link at *port* (every link of it when None) down in ibsim.

        *node*: host name (cn0001), switch name (sw-L1-0001), description or net-file id.
        ibsim marks both ends Down and sends trap 128 from the switch end, so OpenSM
        sweeps; this returns once ibsim has acknowledged, not once OpenSM has swept.
        The traffic model keeps its routes and still writes the port's counters.

        Returns:
            what was done, e.g. ``cn0001 port 1 down``.

        Raises:
            LabError: unknown node or port, or ibsim refused (e.g. not linked).
        """
        return self.links("down", [(node, port)])[0]

    def link_up(self, node: str, port: int | None = None) -> str:
        """Restore a link :meth:`link_down` took down (ibsim's ReLink); see there."""
        return self.links("up", [(node, port)])[0]

    def links(self, action: str, targets: Sequence[tuple[str, int | None]]) -> list[str]:
        """Take several links *action* ("down" or "up"), in order; what was done
        (:func:`ibqos.lab.ibsim.set_links`)."""
        if self.ibsim is None or action not in LINK_COMMANDS:
            raise LabError(f"lab {self.paths.name}: cannot take links {action!r} now")
        nodes = [(self.topo.nodes[self.resolve_node(name)], port) for name, port in targets]
        done = set_links(self.ibsim, action, nodes, [name for name, _ in targets], self.paths.name)
        log.info("lab %s: %s", self.paths.name, "; ".join(done))
        return done

    def _opensm(self, name: str | None = None) -> OpenSM:
        if self.opensm is None or self.ibsim is None:
            raise LabError(f"lab {self.paths.name} is not running")
        if name is None:
            return self.opensm
        if name not in self.others:
            raise LabError(f"lab {self.paths.name}: no OpenSM named {name}")
        return self.others[name]

    def _status(self) -> str:
        return str(load_state(self.paths).get("status", "up"))

    def stop(self, status: str = "stopped") -> None:
        """End OpenSM (every one) and ibsim (this lab's own processes); keep the directory."""
        for other in self.others.values():
            other.stop()
        if self.opensm is not None:
            self.opensm.stop()
        if self.ibsim is not None:
            self.ibsim.stop()
        if self.paths.dir.exists():
            self._save_state(status)

    def destroy(self) -> None:
        """Stop and remove the lab directory."""
        self.stop()
        shutil.rmtree(self.paths.dir, ignore_errors=True)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- clients --------------------------------------------------------------------
    def env(self, host: str | None = None) -> dict[str, str]:
        """Environment for a MAD client attached to *host* (node id or host name;
        default: the OpenSM host), with IBQOS_CONFIG pointing at the lab's config."""
        env = client_env(os.environ, self.sockname, self.resolve_node(host or self.sm_node))
        env["IBQOS_CONFIG"] = str(self.paths.config)
        # the ibqos running this lab (e.g. from a venv) comes first, so that
        # 'ibqos lab run NAME -- ibqos ...' finds the same installation
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bindir, env.get("PATH", os.defpath)])
        return env

    def resolve_node(self, name: str) -> str:
        """Node id of a node given by id, host name or full node description."""
        if name in self.topo.nodes:
            return name
        for node in self.topo.nodes.values():
            if name in (node.hostname, node.desc):
                return node.id
        raise LabError(f"lab {self.paths.name}: no node {name!r}")

    def run(
        self,
        argv: Sequence[str],
        *,
        host: str | None = None,
        check: bool = False,
        timeout: float = 120.0,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command attached to the lab fabric and capture its output (*stdin*: text
        to feed it)."""
        result = procs.run_command(
            argv, env=self.env(host), cwd=self.paths.run, timeout=timeout, stdin=stdin
        )
        if check and result.returncode != 0:
            msg = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabError(f"{' '.join(argv)} failed ({result.returncode}): {msg}")
        return result

    def perfquery(self, port: Port) -> dict[str, int]:
        """PortCountersExtended of *port*, read with perfquery from the port's own node,
        so the query's MAD crosses no link and does not move the counters it reads."""
        lid = self.topo.lids[Port(port.node, 0) if self.is_switch(port.node) else port]
        out = self.run(
            ["perfquery", "-x", str(lid), str(port.num)], host=port.node, check=True
        ).stdout
        values: dict[str, int] = {}
        for line in out.splitlines():
            if m := re.match(r"^([A-Za-z0-9_]+):\.*(\d+)$", line):
                values[m.group(1)] = int(m.group(2))
        return values

    def is_switch(self, node: str) -> bool:
        return self.topo.nodes[node].kind == "switch"

    # -- state ----------------------------------------------------------------------
    def _save_state(self, status: str) -> None:
        """Record *status* and the processes running now (pid + start time).

        A process recorded is one ``lab down`` ends: OpenSM is recorded while it runs
        and dropped once stopped or reaped, and a restarted one replaces the old entry.
        """
        state = load_state(self.paths)
        state["status"] = status
        recorded = state.setdefault("procs", {})
        children = [
            ("ibsim", self.ibsim.proc if self.ibsim else None),
            ("opensm", self.opensm.proc if self.opensm else None),
        ]
        children += [(f"opensm:{name}", osm.proc) for name, osm in self.others.items()]
        for key, proc in children:
            if proc is not None and proc.poll() is None:
                if recorded.get(key, {}).get("pid") != proc.pid:
                    recorded[key] = procs.ref_of(proc.pid).to_dict()
            elif key.startswith("opensm") and proc is not None:
                recorded.pop(key, None)
        if self.opensm is not None:
            state["opensm"] = self.opensm.info()
        if status in ("stopped", "failed"):
            state["procs"] = {
                k: v for k, v in recorded.items() if procs.alive(procs.ProcRef.from_dict(v))
            }
        atomic_write(self.paths.state, json.dumps(state, indent=1) + "\n")
