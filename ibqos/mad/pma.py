"""PerfMgt (PMA) MADs as bytes: request templates and bulk decoding of replies with numpy.

This is the hot path of a sweep: requests are 256-byte templates in which only the
transaction id, the LID and the PortSelect change, and replies are decoded all at once by
viewing a buffer of many 256-byte MADs through a big-endian numpy structured dtype.  The
scapy layers in :mod:`ibqos.mad.layers` describe the same bytes field by field (for
dissection, tests and debugging); a test checks that both decoders agree.

Layouts: IBA vol. 1 rel. 1.3, 13.4.3 (MAD common header), 16.1.3 (PerfMgt attributes);
byte offsets as in libibmad's fields.c (docs/design.md §7.3).  Data counters are in units
of 4 octets.
"""

from __future__ import annotations

import struct

import numpy as np

from ibqos.errors import MadError

MAD_SIZE = 256
#: PerfMgt attribute data start inside the MAD (IBA 16.1: 40 reserved bytes after the header).
DATA_OFFSET = 64

BASE_VERSION = 1
PERF_CLASS = 0x04
CLASS_VERSION = 1
METHOD_GET = 0x01
METHOD_SET = 0x02
METHOD_GET_RESP = 0x81

#: Q_Key of QP1 (IBA 10.2.4.4).
QP1_QKEY = 0x80010000

ATTR_CLASS_PORT_INFO = 0x0001
ATTR_PORT_COUNTERS = 0x0012
ATTR_PORT_VL_XMIT_WAIT = 0x001C
ATTR_PORT_COUNTERS_EXT = 0x001D
ATTR_PORT_XMIT_DATA_SL = 0x0036
ATTR_PORT_RCV_DATA_SL = 0x0037

ALL_PORTS = 0xFF

#: ClassPortInfo.CapabilityMask bits of the PerfMgt class (IBA 16.1.3.1).
CAP_ALL_PORT_SELECT = 1 << 8
CAP_EXT_WIDTH = 1 << 9  # PortCountersExtended with all eight counters
CAP_EXT_WIDTH_NOIETF = 1 << 10  # PortCountersExtended data/packet counters only
CAP_XMIT_WAIT = 1 << 12
#: CapabilityMask2 bit: PortCountersExtended also carries the 64-bit error counters and XmitWait.
CAP2_ADDL_PCE = 1 << 1

#: MAD status values (IBA 13.4.7): bits 4:2 hold the invalid-field code.
STATUS_BUSY = 0x0001
STATUS_UNSUP_METHOD_ATTR = 0x000C
STATUS_INVALID_FIELD = 0x001C


def status_text(status: int) -> str:
    """What a MAD status word means, in a few words."""
    code = (status >> 2) & 0x7
    names = {
        0: "ok",
        1: "bad class version",
        2: "method not supported",
        3: "method/attribute not supported",
        7: "invalid attribute or modifier",
    }
    text = names.get(code, f"invalid field code {code}")
    if status & STATUS_BUSY:
        text = "busy" if code == 0 else f"busy, {text}"
    return f"status 0x{status:04x} ({text})"


def get_request(attr_id: int, port_select: int = 0, tid: int = 0) -> bytes:
    """A 256-byte PerfMgt Get for *attr_id* (IBA 13.4.3); PortSelect goes in data byte 1."""
    header = struct.pack(
        ">BBBBHHQHHI", BASE_VERSION, PERF_CLASS, CLASS_VERSION, METHOD_GET, 0, 0, tid, attr_id, 0, 0
    )
    mad = bytearray(header.ljust(MAD_SIZE, b"\0"))
    mad[DATA_OFFSET + 1] = port_select
    return bytes(mad)


def set_request(attr_id: int, port_select: int, counter_select: int, tid: int = 0) -> bytes:
    """A 256-byte PerfMgt Set for *attr_id* that clears the counters *counter_select*
    names (data bytes 2-3; IBA 16.1.3.5 for PortCounters, annex A13.6.4 for the per-SL
    attributes, where bit *n* is SL *n*'s counter).  The PMA answers with GetResp."""
    mad = bytearray(get_request(attr_id, port_select, tid))
    mad[3] = METHOD_SET
    struct.pack_into(">H", mad, DATA_OFFSET + 2, counter_select)
    return bytes(mad)


#: CounterSelect of a PortXmitDataSL/PortRcvDataSL Set that clears all sixteen SLs.
DATA_SL_ALL = 0xFFFF
#: SLs (and counters) of a PortXmitDataSL/PortRcvDataSL reply.
SL_COUNT = 16
#: The value a per-SL data counter sticks at (32 bits, in 4-octet words).
DATA_SL_MAX = 0xFFFFFFFF


#: Offset of the low 32 bits of the transaction id: the kernel overwrites the upper 32 bits
#: on send (ib_umad), so replies are matched on these.
TID_LOW_OFFSET = 12


def _dtype(fields: list[tuple[str, str | tuple[str, int], int]]) -> np.dtype[np.void]:
    """A structured dtype over whole 256-byte MADs; offsets are absolute MAD bytes."""
    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[1] for f in fields],
            "offsets": [f[2] for f in fields],
            "itemsize": MAD_SIZE,
        }
    )


_HEADER: list[tuple[str, str | tuple[str, int], int]] = [
    ("base_version", "u1", 0),
    ("mgmt_class", "u1", 1),
    ("class_version", "u1", 2),
    ("method", "u1", 3),
    ("status", ">u2", 4),
    ("tid_low", ">u4", TID_LOW_OFFSET),
    ("attr_id", ">u2", 16),
    ("attr_mod", ">u4", 20),
    ("port_select", "u1", DATA_OFFSET + 1),
]

#: MAD header fields only.
HEADER_DTYPE = _dtype(_HEADER)

#: ClassPortInfo (IBA 16.1.3.1, 13.4.8.1): capability masks.
CLASS_PORT_INFO_DTYPE = _dtype(
    [
        *_HEADER,
        ("cap_mask", ">u2", DATA_OFFSET + 2),
        ("cap_mask2_resp_time", ">u4", DATA_OFFSET + 4),
    ]
)

#: PortCounters (IBA 16.1.3.5, table 250): 32-bit data counters and XmitWait.
PORT_COUNTERS_DTYPE = _dtype(
    [
        *_HEADER,
        ("symbol_errors", ">u2", DATA_OFFSET + 4),
        ("link_downed", "u1", DATA_OFFSET + 7),
        ("rcv_errors", ">u2", DATA_OFFSET + 8),
        ("xmit_discards", ">u2", DATA_OFFSET + 14),
        ("xmit_data", ">u4", DATA_OFFSET + 24),
        ("rcv_data", ">u4", DATA_OFFSET + 28),
        ("xmit_pkts", ">u4", DATA_OFFSET + 32),
        ("rcv_pkts", ">u4", DATA_OFFSET + 36),
        ("xmit_wait", ">u4", DATA_OFFSET + 40),
    ]
)

#: PortCountersExtended (IBA 16.1.4.11, table 264): 64-bit counters; XmitWait at data
#: byte 168 only when CapabilityMask2 bit 1 is set.
PORT_COUNTERS_EXT_DTYPE = _dtype(
    [
        *_HEADER,
        ("xmit_data", ">u8", DATA_OFFSET + 8),
        ("rcv_data", ">u8", DATA_OFFSET + 16),
        ("xmit_pkts", ">u8", DATA_OFFSET + 24),
        ("rcv_pkts", ">u8", DATA_OFFSET + 32),
        ("unicast_xmit_pkts", ">u8", DATA_OFFSET + 40),
        ("unicast_rcv_pkts", ">u8", DATA_OFFSET + 48),
        ("multicast_xmit_pkts", ">u8", DATA_OFFSET + 56),
        ("multicast_rcv_pkts", ">u8", DATA_OFFSET + 64),
        ("xmit_wait", ">u8", DATA_OFFSET + 168),
    ]
)

#: PortXmitDataSL / PortRcvDataSL (IBA annex A13.6.4): CounterSelect (bit n clears SL n on a
#: Set), then sixteen 32-bit counters in 4-octet words, SL 0 first.  Only these 32-bit
#: attributes are defined publicly (libibmad, OpenSM); nothing advertises them.
PORT_DATA_SL_DTYPE = _dtype(
    [
        *_HEADER,
        ("counter_select", ">u2", DATA_OFFSET + 2),
        ("data_sl", (">u4", 16), DATA_OFFSET + 4),
    ]
)

#: PortVLXmitWaitCounters (IBA 16.1.4): sixteen 16-bit counters.
PORT_VL_XMIT_WAIT_DTYPE = _dtype([*_HEADER, ("vl_xmit_wait", (">u2", 16), DATA_OFFSET + 4)])

DTYPE_BY_ATTR: dict[int, np.dtype[np.void]] = {
    ATTR_CLASS_PORT_INFO: CLASS_PORT_INFO_DTYPE,
    ATTR_PORT_COUNTERS: PORT_COUNTERS_DTYPE,
    ATTR_PORT_COUNTERS_EXT: PORT_COUNTERS_EXT_DTYPE,
    ATTR_PORT_XMIT_DATA_SL: PORT_DATA_SL_DTYPE,
    ATTR_PORT_RCV_DATA_SL: PORT_DATA_SL_DTYPE,
    ATTR_PORT_VL_XMIT_WAIT: PORT_VL_XMIT_WAIT_DTYPE,
}


def decode(buf: bytes | bytearray | memoryview | np.ndarray, attr_id: int) -> np.ndarray:
    """View *buf* (a whole number of 256-byte MADs) as records of *attr_id*'s layout.

    No bytes are copied; fields read big-endian.  Check ``method``, ``status`` and
    ``attr_id`` of each record before trusting its counters (``check_replies``).  A PCE
    ``xmit_wait`` is only meaningful with CapabilityMask2 bit 1 (ibsim leaves those bytes
    uninitialised).

    Raises:
        MadError: *buf* is not a whole number of MADs, or the attribute has no layout here.
    """
    dtype = DTYPE_BY_ATTR.get(attr_id)
    if dtype is None:
        raise MadError(f"no bulk layout for attribute 0x{attr_id:04x}")
    size = np.asarray(buf).nbytes if isinstance(buf, np.ndarray) else len(memoryview(buf).cast("B"))
    if size % MAD_SIZE:
        raise MadError(f"{size} bytes is not a whole number of {MAD_SIZE}-byte MADs")
    return np.frombuffer(buf, dtype=dtype)


def check_replies(records: np.ndarray, attr_id: int) -> np.ndarray:
    """Per record, an empty string if it is a good GetResp of *attr_id*, else why not."""
    out = np.full(len(records), "", dtype=object)
    bad_class = (records["mgmt_class"] != PERF_CLASS) | (records["base_version"] != BASE_VERSION)
    bad_method = records["method"] != METHOD_GET_RESP
    bad_attr = records["attr_id"] != attr_id
    status = records["status"]
    for i in np.flatnonzero(bad_class | bad_method | bad_attr | (status != 0)):
        rec = records[i]
        if bad_class[i]:
            out[i] = f"not a PerfMgt MAD (class 0x{int(rec['mgmt_class']):02x})"
        elif bad_method[i]:
            out[i] = f"method 0x{int(rec['method']):02x} is not GetResp"
        elif bad_attr[i]:
            out[i] = f"reply for attribute 0x{int(rec['attr_id']):04x}, asked 0x{attr_id:04x}"
        else:
            out[i] = status_text(int(status[i]))
    return out
