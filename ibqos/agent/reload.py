"""SIGHUP: re-read the config file into a running daemon.

A new config is taken whole or not at all: a bad one is logged and counted
(``ibqos_config_load_error``), and the old one kept; so is one that moves
``agent.state_dir`` (only a restart can: the lock, backups and state live there).  Keys
that only a restart can change (``metrics``, ``agent.socket``/``sl_listen``) are logged.
A change of mode is logged here; what it does at once (the SL server starts or stops, the
running jobs are planned again in the new mode, and into enforce mode nothing observe mode
proposed is handed out before OpenSM serves it) is the daemon's
(:class:`ibqos.agent.daemon.Agent`, :meth:`ibqos.agent.cycle.CycleRunner.mode_changed`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ibqos.agent.parts import AgentParts
from ibqos.classify.prior import make_priors
from ibqos.config.load import load_config
from ibqos.errors import IbqosError
from ibqos.metrics import Counters
from ibqos.metrics.health import HealthCollector
from ibqos.opensm.apply import read_file

log = logging.getLogger(__name__)


class Reloader:
    """Re-reads the config file into the agent's parts.

    Args:
        path: the config file (None: nothing to re-read).
        text: its text as the config in force was read from it.
        parts: the parts that take a new config.
        counters: where a refused config is counted.
        health: the health metrics that name the fabric and the routing engine.
    """

    def __init__(
        self,
        path: Path | None,
        text: str | None,
        parts: AgentParts,
        counters: Counters,
        health: HealthCollector,
    ) -> None:
        self.path = path
        self._text = text
        self.parts = parts
        self.counters = counters
        self.health = health

    def reload(self) -> bool:
        """Re-read the config file if it changed; keep the old one if the new one is bad.

        Returns:
            True when a new config was taken and its mode differs from the old one's.
        """
        if self.path is None:
            return False
        text = read_file(self.path)
        if text == self._text:
            # the file is back as the config in force was read (a fix undone to the last
            # good text): nothing to load, and no rejected config is pending any more
            self.counters.config_error_now = False
            log.info("SIGHUP: %s unchanged", self.path)
            return False
        old = self.parts.config
        try:
            config = load_config(self.path)
        except IbqosError as err:
            self._refuse()
            log.error("SIGHUP: new config rejected, keeping the old one: %s", err)
            return False
        if config.agent.state_dir != old.agent.state_dir:
            # Refused, not followed: the agent lock, state.json, the backups (.orig is
            # kept once, ever) and observe/ all live there; moving them under a running
            # agent would split its history and let a second agent in on the old one.
            self._refuse()
            log.warning(
                "SIGHUP: new config not taken, keeping the old one whole: agent.state_dir"
                " changed (%s -> %s): a restart is needed (systemctl restart ibqos)",
                old.agent.state_dir,
                config.agent.state_dir,
            )
            return False
        try:
            lanes = self.parts.lanes_for(config)
            priors = make_priors(config.profiles)  # profiles are re-read on SIGHUP too
        except IbqosError as err:
            self._refuse()
            log.error("SIGHUP: new config rejected, keeping the old one: %s", err)
            return False
        self.counters.config_error_now = False
        if config.metrics != old.metrics:
            log.warning("SIGHUP: changes to the metrics section take effect when ibqos restarts")
        self.health.fabric = config.metrics.fabric
        self.health.routing_engine = lanes.routing_engine
        if (config.agent.socket, config.agent.sl_listen) != (
            old.agent.socket,
            old.agent.sl_listen,
        ):
            log.warning("SIGHUP: changes to agent.socket/sl_listen take effect at restart")
        self._text = text
        self.parts.take(config, lanes, priors)
        log.info("SIGHUP: config %s re-read", self.path)
        if config.mode == old.mode:
            return False
        log.warning("SIGHUP: mode %s -> %s", old.mode, config.mode)
        return True

    def _refuse(self) -> None:
        """Count a new config that was not taken (the old one stays)."""
        self.counters.config_errors += 1
        self.counters.config_error_now = True
