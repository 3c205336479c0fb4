"""Reading a systemd unit as systemd does, for tests that run its commands as written,
and listening on a ``NOTIFY_SOCKET`` as systemd does (:class:`Systemd`).

There is no systemd as PID 1 in the test machine, so the tests do its part: parse the unit
and its drop-ins (systemd.syntax(7)), load ``Environment=`` and ``EnvironmentFile=``
(systemd.exec(5)), split an ``Exec*=`` line into argv and expand ``$VAR`` / ``${VAR}``
(systemd.service(5), "Command lines").  Only what the shipped unit uses is supported;
anything else fails loudly rather than being guessed.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ibqos.deploy.install import sandbox_problem

Unit = dict[str, dict[str, list[str]]]

_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", " ": " "}


def parse_unit(path: Path) -> Unit:
    """Sections -> key -> values in order, the unit file then ``<path>.d/*.conf``; an
    empty assignment resets a key, as in systemd."""
    unit: Unit = {}
    for file in [path, *sorted(Path(f"{path}.d").glob("*.conf"))]:
        section = ""
        for line in _logical_lines(file.read_text()):
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                unit.setdefault(section, {})
                continue
            key, sep, value = line.partition("=")
            assert sep and section, f"{file}: not a key=value line: {line!r}"
            values = unit[section].setdefault(key.strip(), [])
            if value.strip():
                values.append(value.strip())
            else:
                values.clear()
    return unit


def _logical_lines(text: str) -> list[str]:
    """Lines without comments and blank lines, backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def split_words(text: str) -> list[str]:
    """Whitespace-separated words, with "..." / '...' quoting and C-style escapes."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        word, quote = "", None
        while i < n and (quote or not text[i].isspace()):
            c = text[i]
            if c == "\\" and i + 1 < n:
                assert text[i + 1] in _ESCAPES, f"unsupported escape in {text!r}"
                word += _ESCAPES[text[i + 1]]
                i += 2
                continue
            if quote and c == quote:
                quote = None
            elif not quote and c in "\"'":
                quote = c
            else:
                word += c
            i += 1
        assert quote is None, f"unterminated quote in {text!r}"
        words.append(word)
    return words


def environment_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines (comments, blank lines, quotes), as EnvironmentFile= reads them."""
    env: dict[str, str] = {}
    for line in _logical_lines(path.read_text()):
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()), line
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def unit_environment(unit: Unit, root: Path) -> dict[str, str]:
    """Environment= then EnvironmentFile= (paths taken under *root*; ``-``: optional)."""
    service = unit.get("Service", {})
    env: dict[str, str] = {}
    for line in service.get("Environment", []):
        for word in split_words(line):
            key, _, value = word.partition("=")
            env[key] = value
    for name in service.get("EnvironmentFile", []):
        optional = name.startswith("-")
        path = root / name.lstrip("-").lstrip("/")
        if optional and not path.exists():
            continue
        env.update(environment_file(path))
    return env


def exec_argv(line: str, env: dict[str, str]) -> list[str]:
    """An ``Exec*=`` line as the argv systemd runs: a lone ``$VAR`` word splits into
    zero or more words, ``${VAR}`` is replaced in place, ``$$`` is a dollar."""
    assert not line.startswith(tuple("@-:+!")), f"prefixes are not supported here: {line!r}"
    argv: list[str] = []
    for word in split_words(line):
        assert "%" not in word, f"specifiers are not supported here: {word!r}"
        lone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if lone:
            argv += env.get(lone.group(1), "").split()
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
        argv.append(word.replace("$$", "$"))
    return argv


def seconds(value: str) -> float:
    """A systemd time span (``90``, ``2min``, ``1min 30s``, ``500ms``) in seconds."""
    units = {"": 1, "s": 1, "sec": 1, "ms": 1e-3, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


@dataclass(frozen=True)
class Message:
    """One notification: when it came (monotonic and wall clock), from which pid, what."""

    t: float
    wall: float
    pid: int
    text: str


class Systemd:
    """The NOTIFY_SOCKET side: every datagram with its sender's pid (SCM_CREDENTIALS)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[Message] = []
        self._run = True
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while self._run:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except TimeoutError:
                continue
            pid = next(struct.unpack("iII", d[:12])[0] for _, typ, d in anc if typ == 2)
            for line in data.decode().splitlines():
                self.messages.append(Message(time.monotonic(), time.time(), pid, line))

    def wait(self, text: str, after: float, timeout: float, alive: Callable[[], bool]) -> Message:
        """The first message *text* (or starting with it) received after *after*."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in list(self.messages):
                if msg.t >= after and msg.text.startswith(text):
                    return msg
            assert alive(), "the service died"
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} within {timeout} s: {self.texts()[-8:]}")

    def texts(self, prefix: str = "", after: float = 0.0) -> list[str]:
        return [m.text for m in self.messages if m.t >= after and m.text.startswith(prefix)]

    def pings(self, after: float, before: float = float("inf")) -> list[float]:
        return [m.t for m in self.messages if after <= m.t < before and m.text == "WATCHDOG=1"]

    def close(self) -> None:
        self._run = False
        self._thread.join()
        self.sock.close()


def install_force(ibqos: Path, root: Path) -> tuple[str, ...]:
    """``("--force",)`` when the shipped unit's sandbox would hide *ibqos* (a checkout under
    /tmp or /home), else ``()``.  Where the checkout lives is not what the install and
    service tests test; ``ibqos install`` refusing such a place is tested on its own."""
    unit = (root / "systemd/ibqos.service").read_text()
    unit = re.sub(r"^ExecStart=\S+", f"ExecStart={ibqos}", unit, flags=re.M)
    return ("--force",) if sandbox_problem(unit) else ()
