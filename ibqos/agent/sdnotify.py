"""Telling systemd how the daemon is doing: readiness, status text and the watchdog.

``ibqos.service`` is ``Type=notify``: systemd counts the agent as started when it sends
``READY=1`` (after its first successful cycle), shows each ``STATUS=`` line in
``systemctl status``, and with ``WatchdogSec=`` expects ``WATCHDOG=1`` at least once per
``$WATCHDOG_USEC`` microseconds, else it kills and (``Restart=on-failure``) restarts the
agent.  sd_notify(3) and sd_watchdog_enabled(3) define the protocol.

The datagrams are sent by libsystemd's own ``sd_notify()`` through the cysystemd
bindings, which ship it prebuilt in their wheels: no compiler or libsystemd headers are
needed to install ibqos (systemd's own python-systemd needs both), and the address forms
(paths, abstract ``@`` names), credentials and error handling are systemd's.

Watchdog pings come only from the daemon's main loop, never from a thread of their own,
so a loop that hangs stops them and systemd's watchdog fires.  The loop pings every half
of the interval, as sd_watchdog_enabled(3) recommends.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: longest STATUS= text sent, characters (systemctl shows one line)
STATUS_MAX = 200

Sender = Callable[[str, str | None], None]


def _libsystemd_send(name: str, value: str | None) -> None:
    """One ``NAME=value`` (or ``NAME=1``) datagram through libsystemd's sd_notify."""
    from cysystemd.daemon import Notification, notify  # loaded only under systemd

    if value is None:
        notify(Notification[name], return_exceptions=False)
    else:
        notify(Notification[name], value, return_exceptions=False)


class Notifier:
    """The daemon's side of ``Type=notify`` (a no-op when not started by systemd).

    Args:
        send: sends one notification (name, value or None for the ``=1`` ones); None:
            not under systemd, every call does nothing.
        watchdog_s: systemd's watchdog interval, seconds; None: no watchdog.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        send: Sender | None,
        watchdog_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.watchdog_s = watchdog_s if send is not None else None
        self.clock = clock
        self.is_ready = False
        self._last_ping: float | None = None
        self._last_status = ""
        self._failed = False

    @classmethod
    def from_env(cls) -> Notifier:
        """What systemd set up: ``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID``.

        The watchdog is on when WATCHDOG_USEC is a positive integer and WATCHDOG_PID is
        unset or this process (a child that inherited the variables is not meant).
        libsystemd reads the socket's address from the same environment.
        """
        env = os.environ
        if not env.get("NOTIFY_SOCKET"):
            return cls(None)
        usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
        watchdog = None
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog = int(usec) / 1e6
        return cls(_libsystemd_send, watchdog)

    @property
    def enabled(self) -> bool:
        """Whether systemd listens."""
        return self._send is not None

    def ready(self, status: str) -> None:
        """The first cycle succeeded (or a reload finished): ``READY=1`` with a status."""
        self.status(status)
        self._notify("READY", None)
        self.is_ready = True

    def status(self, text: str) -> None:
        """What the agent is doing, for ``systemctl status`` (sent when it changed)."""
        line = " ".join(text.split())[:STATUS_MAX]
        if line != self._last_status:
            self._last_status = line
            self._notify("STATUS", line)

    def reloading(self) -> None:
        """SIGHUP is being handled; :meth:`ready` ends it."""
        self._notify("RELOADING", None)
        self.status("reloading the configuration")

    def stopping(self) -> None:
        """SIGTERM: the current cycle ends, then the agent exits."""
        self._notify("STOPPING", None)
        self.status("stopping")

    def ping_if_due(self) -> None:
        """``WATCHDOG=1`` if half the watchdog interval passed since the last one."""
        if self.watchdog_s is None:
            return
        now = self.clock()
        if self._last_ping is None or now - self._last_ping >= self.watchdog_s / 2:
            self._last_ping = now
            self._notify("WATCHDOG", None)

    def next_ping_s(self) -> float:
        """Seconds until the next ping is due (infinity without a watchdog)."""
        if self.watchdog_s is None:
            return float("inf")
        if self._last_ping is None:
            return 0.0
        return max(0.0, self._last_ping + self.watchdog_s / 2 - self.clock())

    def _notify(self, name: str, value: str | None) -> None:
        if self._send is None:
            return
        try:
            self._send(name, value)
            self._failed = False
        except Exception as err:  # systemd gone is no reason to stop the agent
            if not self._failed:  # once per outage, not once per ping
                log.warning("cannot notify systemd (%s=...): %s", name, err)
            self._failed = True
