"""libibumad through ctypes: open a port, register a PerfMgt agent, send and receive MADs.

libibumad (rdma-core, Debian ``libibumad3``) talks to the kernel's ``/dev/infiniband/umad*``
devices; under the lab, ``LD_PRELOAD=libumad2sim.so`` redirects the same calls to ibsim.
Nothing else is needed: no infiniband-diags process per query.

A ``struct ib_user_mad`` (``umad.h``) is a 64-byte header (agent_id, status, timeout_ms,
retries, length, then ``ib_mad_addr``) followed by the MAD; ``umad_size()`` gives the header
size.  Replies and timed-out sends both come back through ``umad_recv``; a send the kernel
timed out has a non-zero ``status`` (ETIMEDOUT) and carries the request's MAD.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ibqos.errors import CollectError
from ibqos.mad.pma import CLASS_VERSION, MAD_SIZE, PERF_CLASS, QP1_QKEY

LIBRARY = "libibumad.so.3"
UMAD_SYSFS = Path("/sys/class/infiniband_mad/abi_version")
CA_NAME_LEN = 20  # UMAD_CA_NAME_LEN
MAX_CAS = 32  # UMAD_MAX_DEVICES


def _load() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBRARY, use_errno=True)
    except OSError as err:
        raise CollectError(f"{LIBRARY}: cannot load (install libibumad3)") from err
    c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "umad_init": (c_int, []),
        "umad_done": (c_int, []),
        "umad_size": (ctypes.c_size_t, []),
        "umad_get_cas_names": (c_int, [c_void_p, c_int]),
        "umad_open_port": (c_int, [c_char_p, c_int]),
        "umad_close_port": (c_int, [c_int]),
        "umad_register": (c_int, [c_int, c_int, c_int, ctypes.c_uint8, c_void_p]),
        "umad_unregister": (c_int, [c_int, c_int]),
        "umad_set_addr": (c_int, [c_void_p, c_int, c_int, c_int, c_int]),
        "umad_send": (c_int, [c_int, c_int, c_void_p, c_int, c_int, c_int]),
        "umad_recv": (c_int, [c_int, c_void_p, ctypes.POINTER(c_int), c_int]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def check_mad_device(env: Mapping[str, str] | None = None) -> None:
    """Fail early, in one line, where no MAD device can work: libibumad would make up a CA
    name and print its own warnings first.  Under umad2sim (in *env*, default this
    process's environment) the simulator is the device.

    Raises:
        CollectError: no ``/sys/class/infiniband_mad`` (no HCA, or ib_umad not loaded).
    """
    preload = (os.environ if env is None else env).get("LD_PRELOAD", "")
    if "umad2sim" not in preload and not UMAD_SYSFS.exists():
        raise CollectError(
            f"no InfiniBand MAD device: {UMAD_SYSFS} is missing (no HCA, or the ib_umad "
            "module is not loaded)"
        )


class UmadPort:
    """One open umad port with one PerfMgt (class 0x04) agent registered.

    Args:
        ca: CA name (e.g. ``mlx5_0``; ``ibsim0`` in the lab); None for the first CA.
        port: CA port number; 0 for the first active port.

    Raises:
        CollectError: no library, no device, no permission.
    """

    def __init__(self, ca: str | None = None, port: int = 0) -> None:
        check_mad_device()
        self.lib = _load()
        if self.lib.umad_init() < 0:
            raise CollectError("umad_init failed: no InfiniBand MAD support (ib_umad module?)")
        self.ca = ca or self._first_ca()
        self.fd = self.lib.umad_open_port(self.ca.encode(), port)
        if self.fd < 0:
            why = os.strerror(ctypes.get_errno() or -self.fd)
            hint = (
                " (needs read/write access to /dev/infiniband/umad*)" if "ermission" in why else ""
            )
            raise CollectError(f"cannot open umad port {self.ca}/{port}: {why}{hint}")
        self.agent = self.lib.umad_register(self.fd, PERF_CLASS, CLASS_VERSION, 0, None)
        if self.agent < 0:
            self.lib.umad_close_port(self.fd)
            raise CollectError(f"cannot register a PerfMgt agent on {self.ca}/{port}")
        self.hdr = int(self.lib.umad_size())
        self.size = self.hdr + MAD_SIZE
        self.send_buf = ctypes.create_string_buffer(self.size)
        self.recv_buf = ctypes.create_string_buffer(self.size)
        self.send_addr = ctypes.addressof(self.send_buf)
        self.recv_addr = ctypes.addressof(self.recv_buf)
        #: the MAD last received
        self.mad_in = memoryview(
            (ctypes.c_char * MAD_SIZE).from_buffer(self.recv_buf, self.hdr)
        ).cast("B")
        self._hdr_in = memoryview(self.recv_buf).cast("B")[: self.hdr]
        self._len = ctypes.c_int(self.size)
        self._len_ref = ctypes.byref(self._len)
        self._umad_send = self.lib.umad_send
        self._umad_recv = self.lib.umad_recv
        self._lid_at = self._find_lid_offset()

    def _find_lid_offset(self) -> int:
        """Where ``umad_set_addr`` puts the destination LID in the header (big-endian), so
        request buffers can be addressed in bulk without one library call per request."""
        heads = []
        for lid in (0x1234, 0xABCD):
            self.lib.umad_set_addr(self.send_addr, lid, 1, 0, QP1_QKEY)
            heads.append(bytes(self.send_buf)[: self.hdr])
        diff = [i for i in range(self.hdr) if heads[0][i] != heads[1][i]]
        if len(diff) != 2 or heads[0][diff[0] : diff[0] + 2] != b"\x12\x34":
            raise CollectError(f"{LIBRARY}: unexpected ib_user_mad address layout")
        return diff[0]

    def address(self, bufs: np.ndarray, lids: np.ndarray) -> None:
        """Write the umad header of every request buffer: row *i* of *bufs* (n x
        ``size`` bytes, the MAD after ``hdr`` header bytes) goes to QP1 of ``lids[i]``."""
        self.lib.umad_set_addr(self.send_addr, 0, 1, 0, QP1_QKEY)
        bufs[:, : self.hdr] = np.frombuffer(bytes(self.send_buf)[: self.hdr], dtype=np.uint8)
        bufs[:, self._lid_at] = lids >> 8
        bufs[:, self._lid_at + 1] = lids & 0xFF

    def send_at(self, addr: int, timeout_ms: int) -> None:
        """Send the request buffer (header and MAD) at memory address *addr*.

        *timeout_ms* goes to the kernel, which then keeps the request to match its reply
        (with 0 the kernel drops the reply as unsolicited); retries are ours, so the kernel
        gets none.

        Raises:
            CollectError: the device refused the send.
        """
        rc = self._umad_send(self.fd, self.agent, addr, MAD_SIZE, timeout_ms, 0)
        if rc < 0:  # libibumad says -EIO for every failure; errno has the cause
            raise CollectError(f"umad_send: {os.strerror(ctypes.get_errno() or -rc)}")

    def _first_ca(self) -> str:
        names = (ctypes.c_char * CA_NAME_LEN * MAX_CAS)()
        n = self.lib.umad_get_cas_names(names, MAX_CAS)
        if n <= 0:
            raise CollectError("no InfiniBand device found (umad_get_cas_names)")
        return names[0].value.decode()

    def recv(self, timeout_ms: int) -> int:
        """Wait up to *timeout_ms* for one MAD into ``mad_in``.

        Returns:
            the number of MAD bytes received (<= 256), or -1 when none arrived in time.
            Check ``recv_status()`` too: ETIMEDOUT means the kernel gave up on one of our
            sends and ``mad_in`` holds that request.

        Raises:
            CollectError: the device failed.
        """
        self._len.value = MAD_SIZE  # in: room for the MAD after the header; out: its length
        rc: int = self._umad_recv(self.fd, self.recv_addr, self._len_ref, timeout_ms)
        if rc >= 0:
            n: int = self._len.value  # umad_recv gives the MAD length
            return n if 0 <= n <= MAD_SIZE else (0 if n < 0 else MAD_SIZE)
        if -rc in (errno.ETIMEDOUT, errno.EAGAIN, errno.EINTR):
            return -1
        if ctypes.get_errno() == errno.EINTR:  # a signal: libibumad reports it as -EIO
            return -1
        raise CollectError(f"umad_recv on {self.ca}: {os.strerror(-rc)}")

    def recv_status(self) -> int:
        """The umad status of the last received buffer (0, or an errno such as ETIMEDOUT):
        ``ib_user_mad.status``, the second 32-bit word, read without a library call."""
        return int.from_bytes(self._hdr_in[4:8], sys.byteorder)

    def close(self) -> None:
        """Unregister the agent and close the port (idempotent)."""
        if self.fd >= 0:
            self.lib.umad_unregister(self.fd, self.agent)
            self.lib.umad_close_port(self.fd)
            self.fd = -1

    def __enter__(self) -> UmadPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
