"""The asking child of :mod:`bench.handoff.bench`: opens its share of a burst's
connections at one wall-clock moment and prints each asker's latency as JSON.  No ibqos
import: a child starts in a fraction of a second.

Usage: python -m bench.handoff.child TARGET COUNT START_AT BOUND JOB
(TARGET: a UNIX socket path, or tcp:HOST:PORT; START_AT: seconds since the epoch)
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import sys
import time
from typing import Any

#: seconds after which an asker with no answer counts as unanswered
GIVE_UP_S = 12.0
#: seconds between retries of a UNIX connect refused for a full queue
RETRY_S = 0.01


def ask_all(target: str, count: int, start_at: float, bound: float, job: str) -> dict[str, Any]:
    """*count* askers at wall-clock *start_at*: their latencies (seconds, OK answers only)
    and how many got each reply word ("unanswered": none by :data:`GIVE_UP_S`)."""
    address: Any
    if target.startswith("tcp:"):
        host, port = target[4:].rsplit(":", 1)
        family, address = socket.AF_INET, (host, int(port))
    else:
        family, address = socket.AF_UNIX, target
    # the agent is told a little less than the asker waits, as ask_sl does
    question = f"SL {job} {max(0.0, bound - 0.1):.3f}\n".encode()
    sel = selectors.DefaultSelector()
    began: dict[socket.socket, float] = {}
    latencies: list[float] = []
    replies: dict[str, int] = {}
    retry: list[socket.socket] = []

    def count_reply(word: str) -> None:
        replies[word] = replies.get(word, 0) + 1

    def connect(sock: socket.socket) -> None:
        code = sock.connect_ex(address)
        if code in (0, errno.EINPROGRESS):
            sel.register(sock, selectors.EVENT_WRITE)
        elif code == errno.EAGAIN:  # a full UNIX queue: a blocking connect would wait
            retry.append(sock)
        else:
            count_reply(f"connect {errno.errorcode.get(code, str(code))}")
            sock.close()

    socks = []
    for _ in range(count):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        socks.append(sock)
    time.sleep(max(0.0, start_at - time.time()))
    for sock in socks:
        began[sock] = time.monotonic()
        connect(sock)
    end = time.monotonic() + GIVE_UP_S
    while (sel.get_map() or retry) and time.monotonic() < end:
        for key, mask in sel.select(RETRY_S if retry else 0.5):
            fileobj = key.fileobj
            assert isinstance(fileobj, socket.socket)
            sock = fileobj
            try:
                if mask & selectors.EVENT_WRITE:
                    sock.send(question)
                    sel.modify(sock, selectors.EVENT_READ)
                    continue
                data = sock.recv(256)
            except OSError as err:
                data = f"error-{errno.errorcode.get(err.errno or 0, err.errno)}".encode()
            word = data.split(b" ", 1)[0].decode() if data else "EOF"
            count_reply(word)
            if word == "OK":
                latencies.append(time.monotonic() - began[sock])
            sel.unregister(sock)
            sock.close()
        waiting, retry = retry, []
        for sock in waiting:
            connect(sock)
    replies["unanswered"] = len(sel.get_map()) + len(retry)
    for sock in socks:
        sock.close()
    sel.close()
    return {"latencies": latencies, "replies": replies}


if __name__ == "__main__":
    target, count, start_at, bound, job = sys.argv[1:6]
    print(json.dumps(ask_all(target, int(count), float(start_at), float(bound), job)))
