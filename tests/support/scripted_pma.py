"""A scripted PMA: the transport seam of the native collector (``Transport``), answering
each Get the way a real PMA, ibsim or a broken device would, and per-SL replies built byte by
byte.  The native collector's tests and the per-SL tests drive the collector over it."""

from __future__ import annotations

import ctypes
import struct
from collections import deque

import numpy as np

from ibqos.collect.native import NativeBackend
from ibqos.errors import CollectError
from ibqos.fabric.targets import Target
from ibqos.mad import pma

SWITCH_CAPS = 0x1300  # ibsim's switches: AllPortSelect, PCE, XmitWait in PortCounters
CA_CAPS = 0x1200


class ScriptedFabric:
    """A Transport whose PMAs answer from ``counters[(lid, port)]``.

    ``faults[(lid, port_select, attr)]`` is a list of what to do with successive requests
    for that key: "drop", "truncate", "garble", "wrong-attr", "busy", "returned" (the kernel
    hands the request back: timed out), "dup" (answer twice), or a status word (int).

    PortVLXmitWaitCounters: the LIDs in ``vl`` answer with ``vl_values[(lid, port)]``
    (default: VL *n* holds ``port * 100 + n``); the others answer status 0x000C, as a real
    PMA without the attribute does.

    PortXmitDataSL / PortRcvDataSL: the LIDs in ``per_sl`` answer Gets with
    ``sl_words[(lid, port, attr)]`` (16 words, default zeros) and Sets by zeroing the SLs
    whose CounterSelect bit is set (recorded in ``sl_sets``); the LIDs in ``sl_silent``
    never answer (ibsim); the others answer status 0x000C.

    PortCounters Sets (a clear) are recorded in ``pc_sets`` as (lid, port, CounterSelect);
    one that selects the data and packet counters sets the port's base value to 0.
    """

    def __init__(self, caps: dict[int, tuple[int, int]], counters: dict[tuple[int, int], int]):
        self.caps = caps  # lid -> (CapabilityMask, CapabilityMask2)
        self.counters = counters  # (lid, port) -> base value; counters are base + k
        self.faults: dict[tuple[int, int, int], list[object]] = {}
        self.per_sl: set[int] = set()  # lids that implement PortXmitDataSL/PortRcvDataSL
        self.sl_silent: set[int] = set()  # lids that never answer them
        self.sl_words: dict[tuple[int, int, int], list[int]] = {}
        self.sl_sets: list[tuple[int, int, int, int]] = []  # (lid, attr, port, CounterSelect)
        self.pc_sets: list[tuple[int, int, int]] = []  # (lid, port, CounterSelect)
        self.vl: set[int] = set()  # lids that implement PortVLXmitWaitCounters
        self.vl_values: dict[tuple[int, int], list[int]] = {}
        self.hdr = 64
        self.mad_in = memoryview(bytearray(pma.MAD_SIZE))
        self.queue: deque[tuple[bytes, int]] = deque()  # (mad, umad status)
        self.sent: list[tuple[int, int, int]] = []
        self.sent_tids: list[tuple[int, int, int, int]] = []
        self.kernel = False  # refuse a Get whose transaction id is still outstanding
        self.outstanding: set[int] = set()
        self.refuse: set[tuple[int, int]] = set()  # (lid, port) whose sends fail
        self.max_in_flight = 0
        self.in_flight = 0
        self._status = 0

    def address(self, bufs: np.ndarray, lids: np.ndarray) -> None:
        bufs[:, 28] = lids >> 8  # where libibumad keeps it, though any place would do here
        bufs[:, 29] = lids & 0xFF

    def send_at(self, addr: int, timeout_ms: int) -> None:
        raw = ctypes.string_at(addr, self.hdr + pma.MAD_SIZE)
        dlid = int.from_bytes(raw[28:30], "big")
        req = raw[self.hdr :]
        attr = struct.unpack_from(">H", req, 16)[0]
        port = req[pma.DATA_OFFSET + 1]
        tid = struct.unpack_from(">Q", req, 8)[0]
        if (dlid, port) in self.refuse or (self.kernel and tid in self.outstanding):
            raise CollectError("umad_send: Invalid argument")
        self.sent.append((dlid, attr, port))
        self.sent_tids.append((dlid, attr, port, tid))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        todo = self.faults.get((dlid, port, attr), [])
        fault = todo.pop(0) if todo else None
        if fault == "drop" or dlid not in self.caps:
            self.outstanding.add(tid)
            return
        if fault == "returned":
            self.queue.append((req, 110))
            return
        per_sl_attr = attr in (pma.ATTR_PORT_XMIT_DATA_SL, pma.ATTR_PORT_RCV_DATA_SL)
        if per_sl_attr and dlid in self.sl_silent:
            self.outstanding.add(tid)
            return
        if per_sl_attr and dlid not in self.per_sl:
            fault = pma.STATUS_UNSUP_METHOD_ATTR
        if attr == pma.ATTR_PORT_VL_XMIT_WAIT and dlid not in self.vl and fault is None:
            fault = pma.STATUS_UNSUP_METHOD_ATTR
        reply = bytearray(self.reply(req, dlid, attr, port))
        reply[3] = pma.METHOD_GET_RESP
        if isinstance(fault, int):
            struct.pack_into(">H", reply, 4, fault)
        elif fault == "busy":
            struct.pack_into(">H", reply, 4, pma.STATUS_BUSY)
        elif fault == "garble":
            reply[1] = 0x81  # a subnet-management class
        elif fault == "wrong-attr":
            struct.pack_into(">H", reply, 16, pma.ATTR_PORT_COUNTERS)
        elif fault == "truncate":
            reply = reply[:100]
        self.queue.append((bytes(reply), 0))
        if fault == "dup":
            self.queue.append((bytes(reply), 0))

    def reply(self, req: bytes, lid: int, attr: int, port: int) -> bytes:
        mad = bytearray(req)
        d = pma.DATA_OFFSET
        if attr == pma.ATTR_CLASS_PORT_INFO:
            cap, cap2 = self.caps[lid]
            struct.pack_into(">HI", mad, d + 2, cap, (cap2 << 5) | 18)
            return bytes(mad)
        base = self.counters.get((lid, port))
        if base is None:  # no such port: what ibsim does
            struct.pack_into(">H", mad, 4, pma.STATUS_INVALID_FIELD)
            return bytes(mad)
        if attr == pma.ATTR_PORT_COUNTERS_EXT:
            struct.pack_into(">4Q", mad, d + 8, base, base + 1, base + 2, base + 3)
            struct.pack_into(">Q", mad, d + 168, base + 4)
        elif attr == pma.ATTR_PORT_COUNTERS:
            if mad[3] == pma.METHOD_SET:
                select = struct.unpack_from(">H", mad, d + 2)[0]
                self.pc_sets.append((lid, port, select))
                if select & 0xF000 == 0xF000:
                    base = self.counters[(lid, port)] = 0
            small = base & 0xFFFFFFFF
            struct.pack_into(">5I", mad, d + 24, small, small + 1, small + 2, small + 3, 7)
        elif attr == pma.ATTR_PORT_VL_XMIT_WAIT:
            values = self.vl_values.get((lid, port), [port * 100 + vl for vl in range(16)])
            struct.pack_into(">16H", mad, d + 4, *values)
        elif attr in (pma.ATTR_PORT_XMIT_DATA_SL, pma.ATTR_PORT_RCV_DATA_SL):
            words = self.sl_words.setdefault((lid, port, attr), [0] * 16)
            if mad[3] == pma.METHOD_SET:
                select = struct.unpack_from(">H", mad, d + 2)[0]
                self.sl_sets.append((lid, attr, port, select))
                for sl in range(16):
                    if select >> sl & 1:
                        words[sl] = 0
            struct.pack_into(">16I", mad, d + 4, *words)
        return bytes(mad)

    def recv(self, timeout_ms: int) -> int:
        if not self.queue:
            return -1  # the collector's own deadlines do the rest
        mad, self._status = self.queue.popleft()
        self.in_flight -= 1
        self.mad_in[: len(mad)] = mad
        return len(mad)

    def recv_status(self) -> int:
        return self._status

    def close(self) -> None:
        pass


def switch(lid: int, port: int, guid: int = 0x100) -> Target:
    return Target(guid + lid, f"sw{lid}", port, lid, 1, "down", True)


def ca(lid: int, guid: int = 0x200) -> Target:
    return Target(guid + lid, f"cn{lid} mlx5_0", 1, lid, 0, "host", False)


def backend(fab: ScriptedFabric, **kw: object) -> NativeBackend:
    opts: dict[object, object] = {"timeout_s": 0.01, "retries": 1, "window": 4}
    opts.update(kw)
    return NativeBackend(transport=fab, **opts)  # type: ignore[arg-type]


def reply(attr: int, port: int, words: list[int], status: int = 0) -> bytes:
    """A GetResp of a per-SL attribute, byte by byte as IBA annex A13.6.4 lays it out."""
    mad = bytearray(256)
    mad[0:4] = bytes([1, 0x04, 1, 0x81])  # BaseVersion, PerfMgt, ClassVersion, GetResp
    mad[4:6] = status.to_bytes(2, "big")
    mad[12:16] = (0x1234).to_bytes(4, "big")  # TransactionID, low 32 bits
    mad[16:18] = attr.to_bytes(2, "big")
    mad[64 + 1] = port  # PortSelect
    mad[64 + 2 : 64 + 4] = b"\x00\x00"  # CounterSelect
    for sl, w in enumerate(words):
        mad[64 + 4 + 4 * sl : 64 + 8 + 4 * sl] = w.to_bytes(4, "big")
    return bytes(mad)
