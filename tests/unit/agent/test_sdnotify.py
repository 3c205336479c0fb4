"""sd_notify through libsystemd (cysystemd), received on a real datagram socket."""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from ibqos.agent.sdnotify import STATUS_MAX, Notifier


class Listener:
    """A NOTIFY_SOCKET as systemd opens one: datagrams with the sender's credentials."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(address)
        self.sock.settimeout(2.0)

    def take(self) -> tuple[str, int]:
        """The next message and the pid that sent it."""
        data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        pids = [struct.unpack("iII", d[:12])[0] for lvl, typ, d in anc if typ == 2]
        return data.decode(), pids[0]

    def nothing(self) -> bool:
        self.sock.settimeout(0.2)
        try:
            self.sock.recv(4096)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(2.0)
        return False


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    path = tmp_path / "notify.sock"
    lst = Listener(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield lst
    lst.sock.close()


def test_ready_status_stopping_reach_the_socket_from_this_process(listener: Listener) -> None:
    notifier = Notifier.from_env()
    assert notifier.enabled and notifier.watchdog_s is None
    notifier.ready("enforce: cycle 1,\n 2 jobs")
    assert listener.take() == ("STATUS=enforce: cycle 1, 2 jobs", os.getpid())  # one line
    assert listener.take() == ("READY=1", os.getpid())
    assert notifier.is_ready
    notifier.status("enforce: cycle 1, 2 jobs")  # unchanged: not sent again
    notifier.status("x" * 500)
    assert listener.take()[0] == "STATUS=" + "x" * STATUS_MAX
    notifier.reloading()
    assert listener.take()[0] == "RELOADING=1"
    assert listener.take()[0] == "STATUS=reloading the configuration"
    notifier.stopping()
    assert listener.take()[0] == "STOPPING=1"
    assert listener.take()[0] == "STATUS=stopping"
    notifier.ping_if_due()  # no watchdog asked for: no ping
    assert listener.nothing()


def test_watchdog_pings_every_half_interval(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    now = [100.0]
    notifier = Notifier.from_env()
    notifier.clock = lambda: now[0]
    assert notifier.watchdog_s == 4.0
    notifier.ping_if_due()
    assert listener.take()[0] == "WATCHDOG=1"
    for t, due in ((101.0, 1.0), (101.9, 0.1)):
        now[0] = t
        notifier.ping_if_due()
        assert listener.nothing() and notifier.next_ping_s() == pytest.approx(due)
    now[0] = 102.0  # half of 4 s since the last ping
    notifier.ping_if_due()
    assert listener.take()[0] == "WATCHDOG=1"


@pytest.mark.parametrize(
    ("usec", "pid"), [("0", None), ("soon", None), ("2000000", "1"), ("2000000", "99999999")]
)
def test_no_watchdog_for_another_process_or_a_bad_interval(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, usec: str, pid: str | None
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid is not None:
        monkeypatch.setenv("WATCHDOG_PID", pid)  # inherited by a child: not ours
    notifier = Notifier.from_env()
    assert notifier.enabled and notifier.watchdog_s is None
    notifier.ping_if_due()
    assert listener.nothing()


def test_abstract_socket_names_work(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"ibqos-test-{os.getpid()}"
    lst = Listener("\0" + name)  # systemd may hand out "@name": the abstract namespace
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        Notifier.from_env().status("observe")
        assert lst.take() == ("STATUS=observe", os.getpid())
    finally:
        lst.sock.close()


def test_not_under_systemd_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    notifier = Notifier.from_env()
    assert not notifier.enabled and notifier.watchdog_s is None
    notifier.ready("x")  # no error, nothing to send
    notifier.ping_if_due()
    assert notifier.next_ping_s() == float("inf")


def test_a_vanished_socket_is_logged_once_and_never_fatal(
    listener: Listener, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier.from_env()
    (tmp_path / "notify.sock").unlink()  # systemd went away
    with caplog.at_level(logging.WARNING, "ibqos.agent.sdnotify"):
        for i in range(3):
            notifier.status(f"cycle {i}")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot notify systemd" in warnings[0], warnings
