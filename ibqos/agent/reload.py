"""SIGHUP: re-read the config file into a running daemon.

A new config is taken whole or not at all: a bad one is logged and counted
(``ibqos_config_load_error``), and the old one kept; so is one that moves
``agent.state_dir`` (only a restart can: the lock, backups and state live there).  Keys
that only a restart can change (``metrics``, ``agent.socket``/``sl_listen``) are logged.
A change of mode takes effect at once: the SL server starts or stops, and the running
jobs are planned again in the new mode.
"""

from __future__ import annotations

import logging

from ibqos.agent.cycle import CycleAgent
from ibqos.classify.prior import make_priors
from ibqos.config.load import load_config
from ibqos.errors import IbqosError
from ibqos.opensm.apply import read_file
from ibqos.slurm.jobsource import make_job_source

log = logging.getLogger(__name__)


class ReloadingAgent(CycleAgent):
    """The daemon's parts and cycles, and the config re-read on SIGHUP."""

    def _handle_reload(self) -> None:
        """SIGHUP: re-read the config, tell systemd, and act on a change of mode at once."""
        ready = self.notifier.is_ready  # before the first good cycle there is no READY yet
        if ready:
            self.notifier.reloading()
        old_mode = self.config.mode
        self.reload()
        if self.config.mode != old_mode:
            log.warning("SIGHUP: mode %s -> %s", old_mode, self.config.mode)
            self.metrics.health.dry_run = self.observing
            if self.lock is not None:
                self.lock.set_mode(self.config.mode)
            if self.observing and self.sl_server is not None:
                self.sl_server.close()
                self.sl_server = None
            elif self._sl_wanted:
                self.serve_sl()
            if self.jobs_seen is not None:  # plan now, in the new mode
                self._soft(lambda: self.cycle(sweep=False), report=False)
        if ready:
            self.notifier.ready(self._status_line())

    def reload(self) -> None:
        """Re-read the config file if it changed; keep the old one if the new one is bad."""
        if self.config_path is None:
            return
        text = read_file(self.config_path)
        if text == self._config_text:
            # the file is back as the config in force was read (a fix undone to the last
            # good text): nothing to load, and no rejected config is pending any more
            self.counters.config_error_now = False
            log.info("SIGHUP: %s unchanged", self.config_path)
            return
        try:
            config = load_config(self.config_path)
        except IbqosError as err:
            self._refuse_config()
            log.error("SIGHUP: new config rejected, keeping the old one: %s", err)
            return
        if config.agent.state_dir != self.config.agent.state_dir:
            # Refused, not followed: the agent lock, state.json, the backups (.orig is
            # kept once, ever) and observe/ all live there; moving them under a running
            # agent would split its history and let a second agent in on the old one.
            self._refuse_config()
            log.warning(
                "SIGHUP: new config not taken, keeping the old one whole: agent.state_dir"
                " changed (%s -> %s): a restart is needed (systemctl restart ibqos)",
                self.config.agent.state_dir,
                config.agent.state_dir,
            )
            return
        try:
            lanes = self._lanes(config, self.fabric)
            priors = make_priors(config.profiles)  # profiles are re-read on SIGHUP too
        except IbqosError as err:
            self._refuse_config()
            log.error("SIGHUP: new config rejected, keeping the old one: %s", err)
            return
        self.counters.config_error_now = False
        if config.metrics != self.config.metrics:
            log.warning("SIGHUP: changes to the metrics section take effect when ibqos restarts")
        self.metrics.health.fabric = config.metrics.fabric
        self.metrics.health.routing_engine = lanes.routing_engine
        old = self.config
        if (config.agent.socket, config.agent.sl_listen) != (
            old.agent.socket,
            old.agent.sl_listen,
        ):
            log.warning("SIGHUP: changes to agent.socket/sl_listen take effect at restart")
        self._config_text = text
        self.config = config
        self.lanes = lanes
        self.decider.lanes = lanes
        self.decider.classifier.thresholds = config.classify
        self.decider.priors = priors
        if (config.jobs, config.slurm) != (old.jobs, old.slurm):
            self.source = make_job_source(config)  # else keep its state (grace, last jobs)
        # every opensm key (log, sweep_timeout_s, how to signal) takes effect at the next
        # apply: the Applier holds nothing but them, so it is rebuilt; conf and policy_file
        # follow because render() reads self.config each cycle
        self.applier = self._applier(config)
        fc, ofc = config.fabric, old.fabric
        if (fc.routes, fc.lft_dump, fc.refresh_s) != (ofc.routes, ofc.lft_dump, ofc.refresh_s):
            self.routes.close()
            self.routes = self._route_source(config)
            self.decider.set_routes(None)  # until the new source has tables
            self.refresh_routes()
        if (config.tuning, config.mode, lanes.weight_ratio) != (
            old.tuning,
            old.mode,
            self.tuning.ratio,
        ):
            self.tuning = self._tuning(config)  # a new round, from the law, in the new terms
        log.info("SIGHUP: config %s re-read", self.config_path)

    def _refuse_config(self) -> None:
        """Count a new config that was not taken (the old one stays)."""
        self.counters.config_errors += 1
        self.counters.config_error_now = True
