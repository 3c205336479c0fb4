"""scapy MAD layers: dissect the recorded lab MADs, build requests byte for byte, and check
that the scapy layers and the bulk numpy decoder (``ibqos.mad.pma``) read the same values."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scapy.packet import Raw

from ibqos.errors import MadError
from ibqos.mad import pma
from ibqos.mad.layers import (
    MAD,
    ClassPortInfo,
    PortCounters,
    PortCountersExtended,
    PortRcvDataSL,
    PortVLXmitWaitCounters,
    PortXmitDataSL,
    counters,
    dissect,
)
from tests.support.paths import TESTS

DATA = TESTS / "data" / "mad"

LAYERS = {
    pma.ATTR_CLASS_PORT_INFO: ClassPortInfo,
    pma.ATTR_PORT_COUNTERS: PortCounters,
    pma.ATTR_PORT_COUNTERS_EXT: PortCountersExtended,
    pma.ATTR_PORT_XMIT_DATA_SL: PortXmitDataSL,
    pma.ATTR_PORT_RCV_DATA_SL: PortRcvDataSL,
    pma.ATTR_PORT_VL_XMIT_WAIT: PortVLXmitWaitCounters,
}

# recording -> (request file, layer, PortSelect asked, its reply's method byte)
RECORDED = {
    "cpi-switch.bin": ("cpi-switch.req.bin", ClassPortInfo, 0, 0x81),
    "cpi-ca.bin": ("cpi-ca.req.bin", ClassPortInfo, 0, 0x81),
    "pc-switch-port1.bin": ("pc-switch-port1.req.bin", PortCounters, 1, 0x81),
    "pce-switch-port1.bin": ("pce-switch-port1.req.bin", PortCountersExtended, 1, 0x81),
    "pce-switch-allports.bin": ("pce-switch-allports.req.bin", PortCountersExtended, 0xFF, 0x81),
    "pce-ca-port1.bin": ("pce-ca-port1.req.bin", PortCountersExtended, 1, 0x81),
    "pce-ca-badport.bin": ("pce-ca-badport.req.bin", PortCountersExtended, 2, 0x81),
    "vlxmitwait-switch-port1.bin": (
        "vlxmitwait-switch-port1.req.bin",
        PortVLXmitWaitCounters,
        1,
        0x81,
    ),
    # no reply: umad_recv handed back the request itself (ETIMEDOUT), so still a Get
    "xmitdatasl-switch-port1.timedout.bin": (
        "xmitdatasl-switch-port1.req.bin",
        PortXmitDataSL,
        1,
        0x01,
    ),
}
REQUESTS = sorted({req for req, *_ in RECORDED.values()})


def raw(name):
    return (DATA / name).read_bytes()


def method(pkt):
    return pkt.R << 7 | pkt.Method


def test_every_recording_is_covered():
    on_disk = {p.name for p in DATA.glob("*.bin")}
    assert on_disk == set(RECORDED) | set(REQUESTS)


# -- dissecting recorded MADs ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_reply_header(name):
    req_name, layer, port_select, meth = RECORDED[name]
    pkt, req = dissect(raw(name)), dissect(raw(req_name))
    assert isinstance(pkt.payload, layer) and isinstance(req.payload, layer)
    assert (pkt.BaseVersion, pkt.MgmtClass, pkt.ClassVersion) == (1, 0x04, 1)
    assert method(pkt) == meth and method(req) == pma.METHOD_GET
    assert pkt.AttributeID == req.AttributeID and pkt.AttributeModifier == 0
    # ibsim rewrote the upper bits on the way; the low 32 bits identify the request
    assert pkt.TransactionID & 0xFFFFFFFF == req.TransactionID & 0xFFFFFFFF
    assert pkt.TransactionID != req.TransactionID
    if layer is not ClassPortInfo:
        assert pkt.payload.PortSelect == req.payload.PortSelect == port_select


@pytest.mark.parametrize("name", sorted(RECORDED) + REQUESTS)
def test_recorded_bytes_round_trip(name):
    data = raw(name)
    pkt = dissect(data)
    assert len(pkt) == pma.MAD_SIZE == len(pkt.payload) + pma.DATA_OFFSET
    assert bytes(pkt) == data  # reserved bytes, garbage included, survive


@pytest.mark.parametrize(("name", "cap_mask"), [("cpi-switch.bin", 0x1300), ("cpi-ca.bin", 0x1200)])
def test_class_port_info(name, cap_mask):
    cpi = dissect(raw(name))[ClassPortInfo]
    assert (cpi.BaseVersion, cpi.ClassVersion) == (1, 1)
    assert cpi.CapabilityMask == cap_mask
    # data bytes 4-7 are 0x00000012: CapabilityMask2 is the upper 27 bits, RespTimeValue
    # the low 5
    assert cpi.CapabilityMask2 == 0 and cpi.RespTimeValue == 18
    assert cpi.RedirectGID == "::" and cpi.RedirectQP == 0 and cpi.TrapLID == 0
    assert cpi.CapabilityMask & pma.CAP_EXT_WIDTH and cpi.CapabilityMask & pma.CAP_XMIT_WAIT
    assert bool(cpi.CapabilityMask & pma.CAP_ALL_PORT_SELECT) == (name == "cpi-switch.bin")
    with pytest.raises(MadError, match="ClassPortInfo carries no counters"):
        counters(dissect(raw(name)))


def test_port_counters():
    c = counters(dissect(raw("pc-switch-port1.bin")))
    assert c["PortXmitData"] == c["PortRcvData"] == 0x510
    assert c["PortXmitPkts"] == c["PortRcvPkts"] == 0x12
    assert c["PortXmitWait"] == 0 and c["SymbolErrorCounter"] == 0
    assert list(c) == list(PortCounters.counter_names)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("pce-switch-port1.bin", (0xD8, 0xD8, 3, 3, 0, 0)),
        ("pce-switch-allports.bin", (0x38D0, 0x3918, 0xCA, 0xCB, 0, 0)),
        (
            "pce-ca-port1.bin",
            (0x2E5932D887, 0x2E5932D8CF, 0x172C996E, 0x172C996F) + (0x172C996D,) * 2,
        ),
    ],
)
def test_port_counters_extended(name, want):
    c = counters(dissect(raw(name)))
    names = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")
    names += ("PortUnicastXmitPkts", "PortUnicastRcvPkts")
    assert tuple(c[n] for n in names) == want
    assert c["PortMulticastXmitPkts"] == c["PortMulticastRcvPkts"] == 0


def test_pce_error_counters_hold_garbage_without_capmask2():
    """ibsim sets CapabilityMask2 0 and leaves the tail of its reply uninitialised: the
    64-bit error counters (data bytes 72-183) mean nothing there, so callers gate on
    CapabilityMask2 bit 1 rather than on the values."""
    c = counters(dissect(raw("pce-ca-port1.bin")))
    assert c["PortXmitWait"] == 0x2500000000000000
    assert c["VL15Dropped"] == 0x3001000000000000
    assert dissect(raw("cpi-ca.bin"))[ClassPortInfo].CapabilityMask2 & pma.CAP2_ADDL_PCE == 0


def test_vl_xmit_wait():
    c = counters(dissect(raw("vlxmitwait-switch-port1.bin")))
    assert list(c) == [f"PortVLXmitWait{vl}" for vl in range(16)]
    assert set(c.values()) == {0}


def test_error_status_reply():
    pkt = dissect(raw("pce-ca-badport.bin"))
    assert pkt.Status == pma.STATUS_INVALID_FIELD == 0x001C
    assert pkt[PortCountersExtended].PortSelect == 2
    with pytest.raises(MadError, match=r"status 0x001c \(invalid attribute or modifier\)"):
        counters(pkt)


def test_timed_out_request_is_not_a_reply():
    pkt = dissect(raw("xmitdatasl-switch-port1.timedout.bin"))
    assert (pkt.R, pkt.Method, pkt.AttributeID) == (0, pma.METHOD_GET, 0x0036)
    with pytest.raises(MadError, match="method 0x01 is not GetResp"):
        counters(pkt)


def test_unknown_attribute_stays_raw():
    data = bytearray(raw("pc-switch-port1.bin"))
    data[16:18] = (0x0010).to_bytes(2, "big")  # PortSamplesControl: no layer here
    pkt = dissect(bytes(data))
    assert isinstance(pkt.payload, Raw) and bytes(pkt) == bytes(data)
    with pytest.raises(MadError, match=r"no layer for attribute 0x0010 \(PortSamplesControl\)"):
        counters(pkt)


# -- building ------------------------------------------------------------------------------
@pytest.mark.parametrize("attr", sorted(LAYERS))
@pytest.mark.parametrize(("port_select", "tid"), [(0, 0), (3, 0x1234), (0xFF, 2**64 - 1)])
def test_build_equals_pma_request(attr, port_select, tid):
    data = {} if attr == pma.ATTR_CLASS_PORT_INFO else {"PortSelect": port_select}
    if attr == pma.ATTR_CLASS_PORT_INFO:
        port_select = 0  # data byte 1 is ClassVersion there, and 0 in a Get
    pkt = MAD(TransactionID=tid) / LAYERS[attr](**data)
    assert bytes(pkt) == pma.get_request(attr, port_select, tid)


def test_build_pce_request_example():
    tid = 0xDEADBEEF
    built = bytes(MAD(TransactionID=tid) / PortCountersExtended(PortSelect=3))
    assert built == pma.get_request(0x1D, 3, tid)


@pytest.mark.parametrize("name", REQUESTS)
def test_recorded_requests_rebuilt_from_fields(name):
    data = raw(name)
    tid = int.from_bytes(data[8:16], "big")
    layer = LAYERS[int.from_bytes(data[16:18], "big")]
    fields = {} if layer is ClassPortInfo else {"PortSelect": data[pma.DATA_OFFSET + 1]}
    assert bytes(MAD(TransactionID=tid) / layer(**fields)) == data


def test_build_sets_class_and_attribute_from_bindings():
    for attr, layer in LAYERS.items():
        pkt = MAD(bytes(MAD() / layer()))
        assert (pkt.MgmtClass, pkt.AttributeID) == (pma.PERF_CLASS, attr)
        assert type(pkt.payload) is layer


def test_build_reply_and_nibbles():
    pkt = MAD(R=1, Method=1, TransactionID=5) / PortCounters(
        PortSelect=7, LocalLinkIntegrityErrors=0xA, ExcessiveBufferOverrunErrors=0x5
    )
    data = bytes(pkt)
    assert data[3] == pma.METHOD_GET_RESP
    assert data[pma.DATA_OFFSET + 19] == 0xA5
    back = counters(dissect(data))
    assert (back["LocalLinkIntegrityErrors"], back["ExcessiveBufferOverrunErrors"]) == (10, 5)


def test_class_port_info_fields_round_trip():
    cpi = ClassPortInfo(
        CapabilityMask=0x1300,
        CapabilityMask2=0x7FFFFFF,
        RespTimeValue=0x1F,
        RedirectGID="fe80::2:c903:0:1",
        RedirectTC=0xAB,
        RedirectSL=0xC,
        RedirectFL=0xFFFFF,
        RedirectQP=0xFFFFFF,
        RedirectQ_Key=pma.QP1_QKEY,
        TrapHL=0xFF,
        TrapQP=0x123456,
    )
    data = bytes(MAD(R=1) / cpi)
    assert len(data) == pma.MAD_SIZE
    assert data[pma.DATA_OFFSET + 4 : pma.DATA_OFFSET + 8] == b"\xff\xff\xff\xff"
    rec = pma.decode(data, pma.ATTR_CLASS_PORT_INFO)[0]
    assert int(rec["cap_mask2_resp_time"]) >> 5 == 0x7FFFFFF
    back = dissect(data)[ClassPortInfo]
    for name in ("RedirectGID", "RedirectTC", "RedirectSL", "RedirectFL", "RedirectQP"):
        assert getattr(back, name) == getattr(cpi, name)
    assert (back.RedirectQ_Key, back.TrapHL, back.TrapQP) == (pma.QP1_QKEY, 0xFF, 0x123456)


# -- agreement with the numpy decoder ------------------------------------------------------
def _sl_names(attr):
    prefix = "XmtDataSL" if attr == pma.ATTR_PORT_XMIT_DATA_SL else "RcvDataSL"
    return [f"{prefix}{n}" for n in range(16)]


# numpy field -> the same value read from the scapy dissection
_HEADER_MAP = {
    "base_version": lambda p: p.BaseVersion,
    "mgmt_class": lambda p: p.MgmtClass,
    "class_version": lambda p: p.ClassVersion,
    "method": method,
    "status": lambda p: p.Status,
    "tid_low": lambda p: p.TransactionID & 0xFFFFFFFF,
    "attr_id": lambda p: p.AttributeID,
    "attr_mod": lambda p: p.AttributeModifier,
    # data byte 1 for every attribute; in ClassPortInfo that byte is ClassVersion
    "port_select": lambda p: p.payload.getfieldval(
        "ClassVersion" if isinstance(p.payload, ClassPortInfo) else "PortSelect"
    ),
}


def _attr_map(attr):
    if attr == pma.ATTR_CLASS_PORT_INFO:
        return {
            "cap_mask": lambda p: p.payload.CapabilityMask,
            "cap_mask2_resp_time": lambda p: (
                p.payload.CapabilityMask2 << 5 | p.payload.RespTimeValue
            ),
        }
    if attr == pma.ATTR_PORT_COUNTERS:
        names = {
            "symbol_errors": "SymbolErrorCounter",
            "link_downed": "LinkDownedCounter",
            "rcv_errors": "PortRcvErrors",
            "xmit_discards": "PortXmitDiscards",
            "xmit_data": "PortXmitData",
            "rcv_data": "PortRcvData",
            "xmit_pkts": "PortXmitPkts",
            "rcv_pkts": "PortRcvPkts",
            "xmit_wait": "PortXmitWait",
        }
    elif attr == pma.ATTR_PORT_COUNTERS_EXT:
        names = {
            "xmit_data": "PortXmitData",
            "rcv_data": "PortRcvData",
            "xmit_pkts": "PortXmitPkts",
            "rcv_pkts": "PortRcvPkts",
            "unicast_xmit_pkts": "PortUnicastXmitPkts",
            "unicast_rcv_pkts": "PortUnicastRcvPkts",
            "multicast_xmit_pkts": "PortMulticastXmitPkts",
            "multicast_rcv_pkts": "PortMulticastRcvPkts",
            "xmit_wait": "PortXmitWait",
        }
    elif attr == pma.ATTR_PORT_VL_XMIT_WAIT:
        return {
            "vl_xmit_wait": lambda p: [
                p.payload.getfieldval(f"PortVLXmitWait{n}") for n in range(16)
            ]
        }
    else:
        sl = _sl_names(attr)
        return {
            "counter_select": lambda p: p.payload.CounterSelect,
            "data_sl": lambda p: [p.payload.getfieldval(n) for n in sl],
        }
    return {k: (lambda p, n=v: p.payload.getfieldval(n)) for k, v in names.items()}


def assert_agree(buf, attr):
    recs = pma.decode(buf, attr)
    mapping = _HEADER_MAP | _attr_map(attr)
    assert set(mapping) == set(recs.dtype.names), "map every numpy field to a scapy one"
    assert len(recs) == len(buf) // pma.MAD_SIZE > 0
    for i, rec in enumerate(recs):
        pkt = dissect(buf[i * pma.MAD_SIZE : (i + 1) * pma.MAD_SIZE])
        assert isinstance(pkt.payload, LAYERS[attr])
        for field, get in mapping.items():
            want = rec[field].tolist()
            assert get(pkt) == want, f"MAD {i}: {field}"


@pytest.mark.parametrize("name", sorted(RECORDED) + REQUESTS)
def test_recorded_decoders_agree(name):
    data = raw(name)
    assert_agree(data, int.from_bytes(data[16:18], "big"))


def test_recorded_concatenated_decoders_agree():
    for attr in (pma.ATTR_PORT_COUNTERS_EXT, pma.ATTR_CLASS_PORT_INFO):
        names = [n for n in sorted(RECORDED) + REQUESTS if dissect(raw(n)).AttributeID == attr]
        assert_agree(b"".join(raw(n) for n in names), attr)


def _maxima(layer):
    """Largest value of each counter: what all-ones bytes dissect to."""
    return {n: int(layer(b"\xff" * 192).getfieldval(n)) for n in layer.counter_names}


def _value(rnd, top):
    edges = [0, 1, top, top - 1, top // 2, top // 2 + 1]
    edges += [e for e in (2**32 - 1, 2**32, 2**32 + 1, 2**63, 2**64 - 2) if e <= top]
    return rnd.choice(edges) if rnd.random() < 0.5 else rnd.randint(0, top)


def _synthetic(rnd, attr, n):
    layer = LAYERS[attr]
    maxima = _maxima(layer)
    out = []
    for _ in range(n):
        data = {name: _value(rnd, top) for name, top in maxima.items()}
        if attr == pma.ATTR_CLASS_PORT_INFO:
            data = {
                "BaseVersion": 1,
                "ClassVersion": 1,
                "CapabilityMask": rnd.randint(0, 0xFFFF),
                "CapabilityMask2": _value(rnd, 2**27 - 1),
                "RespTimeValue": rnd.randint(0, 31),
            }
        else:
            data["PortSelect"] = rnd.randint(0, 0xFF)
            data["CounterSelect"] = rnd.randint(0, 0xFFFF)
        hdr = MAD(
            R=1,
            Method=pma.METHOD_GET,
            Status=rnd.choice([0, 0, pma.STATUS_INVALID_FIELD, pma.STATUS_UNSUP_METHOD_ATTR]),
            TransactionID=_value(rnd, 2**64 - 1),
            AttributeModifier=_value(rnd, 2**32 - 1),
        )
        out.append(bytes(hdr / layer(**data)))
    return b"".join(out)


@pytest.mark.parametrize("attr", sorted(LAYERS))
def test_synthetic_decoders_agree(attr):
    rnd = random.Random(attr)
    buf = _synthetic(rnd, attr, 64)
    assert len(buf) == 64 * pma.MAD_SIZE
    assert_agree(buf, attr)


def test_synthetic_extremes_reach_numpy_intact():
    rnd = random.Random(1)
    buf = _synthetic(rnd, pma.ATTR_PORT_COUNTERS_EXT, 64)
    recs = pma.decode(buf, pma.ATTR_PORT_COUNTERS_EXT)
    assert recs["xmit_data"].dtype == np.dtype(">u8")
    seen = set(recs["xmit_data"].tolist()) | set(recs["rcv_pkts"].tolist())
    assert {2**64 - 1, 2**32} <= seen  # the edge values did get through


# -- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 23])
def test_header_truncated(size):
    with pytest.raises(MadError, match=f"truncated MAD: {size} bytes, the common header"):
        dissect(raw("pc-switch-port1.bin")[:size])


@pytest.mark.parametrize("size", [24, 64, 100, 255])
def test_attribute_truncated(size):
    with pytest.raises(MadError, match=f"truncated PortCountersExtended MAD: {size} bytes"):
        dissect(raw("pce-ca-port1.bin")[:size])


def test_oversized():
    with pytest.raises(MadError, match="oversized PortCounters MAD: 512 bytes, expected 256"):
        dissect(raw("pc-switch-port1.bin") * 2)


def test_not_perfmgt():
    smp = bytearray(raw("pc-switch-port1.bin"))
    smp[1] = 0x81
    with pytest.raises(MadError, match=r"not a PerfMgt MAD \(class 0x81"):
        dissect(bytes(smp))
    with pytest.raises(MadError, match="not a PerfMgt MAD"):
        dissect(bytes(range(256)))


def test_mad_error_is_one_line():
    with pytest.raises(MadError) as err:
        dissect(b"\x01\x81" + bytes(30))
    assert err.value.category == "mad" and "\n" not in str(err.value)


def test_counters_without_attribute_layer():
    with pytest.raises(MadError, match=r"no layer for attribute 0x0000 \(unknown\)"):
        counters(MAD())
    with pytest.raises(MadError, match="Raw is not a PerfMgt attribute"):
        counters(Raw(b"x"))


def test_pma_check_replies_messages():
    pc, pce = raw("pc-switch-port1.bin"), raw("pce-ca-port1.bin")
    smp = bytearray(pce)
    smp[1] = 0x81
    bufs = [pc, pce, raw("pce-ca-badport.bin"), bytes(smp), raw("pce-ca-port1.req.bin")]
    why = pma.check_replies(pma.decode(b"".join(bufs), pma.ATTR_PORT_COUNTERS_EXT), 0x1D)
    assert why.tolist() == [
        "reply for attribute 0x0012, asked 0x001d",
        "",
        "status 0x001c (invalid attribute or modifier)",
        "not a PerfMgt MAD (class 0x81)",
        "method 0x01 is not GetResp",
    ]
