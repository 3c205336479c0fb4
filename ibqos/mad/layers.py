"""InfiniBand management datagrams (MAD) used by ibqos, as scapy layers.

References: InfiniBand Architecture Specification vol. 1, release 1.3:
13.4.2-13.4.3 (MAD format and common header), 13.4.8.1 (ClassPortInfo), 16.1.1 (PerfMgt MAD
format), 16.1.3.5 (PortCounters), 16.1.4 (optional PerfMgt attributes, among them
PortVLXmitWaitCounters), 16.1.4.11 (PortCountersExtended) and annex A13.6.4
(PortXmitDataSL, PortRcvDataSL).  Where the spec is ambiguous, field names and bit positions
follow libibmad ``fields.c`` (rdma-core), which perfquery prints.

These layers build and dissect one MAD at a time, for tests, debugging and the odd request.
A sweep decodes thousands of replies at once with :mod:`ibqos.mad.pma` (numpy); tests check
that both decoders read the same values from the same bytes.

Every PerfMgt MAD is 256 bytes: the 24-byte common header, 40 reserved bytes, then 192 bytes
of attribute data.  :class:`MAD` holds the first 64 bytes and each attribute layer exactly the
192 data bytes, so field offsets inside a layer are the spec's data offsets.  Data counters
count octets divided by 4; counters stick at their maximum instead of wrapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    IntField,
    IP6Field,
    LongField,
    ShortField,
    StrFixedLenField,
    X3BytesField,
    XByteField,
    XIntField,
    XLongField,
    XShortEnumField,
    XShortField,
)
from scapy.packet import Packet, bind_layers

from ibqos.errors import MadError
from ibqos.mad import pma

if TYPE_CHECKING:
    from scapy.fields import AnyField

__all__ = [
    "ATTRIBUTES",
    "MAD",
    "METHODS",
    "MGMT_CLASSES",
    "ClassPortInfo",
    "PortCounters",
    "PortCountersExtended",
    "PortRcvDataSL",
    "PortVLXmitWaitCounters",
    "PortXmitDataSL",
    "counters",
    "dissect",
]

_DATA_SIZE = pma.MAD_SIZE - pma.DATA_OFFSET  # 192
_HEADER_SIZE = 24

#: Management class values (IBA 13.4.4).
MGMT_CLASSES = {
    0x01: "SubnMgtLID",
    0x03: "SubnAdm",
    0x04: "PerfMgt",
    0x05: "BaseboardMgt",
    0x06: "DevMgt",
    0x07: "CommMgt",
    0x08: "SNMP",
    0x21: "CongestionMgt",
    0x81: "SubnMgtDirected",
}

#: Method values without the response bit R (IBA 13.4.5): a reply to Get or Set has R set
#: and Method Get, i.e. byte 3 is 0x81 (GetResp).
METHODS = {
    0x01: "Get",
    0x02: "Set",
    0x03: "Send",
    0x05: "Trap",
    0x06: "Report",
    0x07: "TrapRepress",
}

#: PerfMgt attribute IDs (libibmad ``mad.h``, enum GSI_ATTR_ID).  Only the ones with a layer
#: below are dissected; the others stay Raw.
ATTRIBUTES = {
    pma.ATTR_CLASS_PORT_INFO: "ClassPortInfo",
    0x0010: "PortSamplesControl",
    0x0011: "PortSamplesResult",
    pma.ATTR_PORT_COUNTERS: "PortCounters",
    0x0015: "PortRcvErrorDetails",
    0x0016: "PortXmitDiscardDetails",
    0x0017: "PortOpRcvCounters",
    0x0018: "PortFlowCtlCounters",
    0x0019: "PortVLOpPackets",
    0x001A: "PortVLOpData",
    0x001B: "PortVLXmitFlowCtlUpdateErrors",
    pma.ATTR_PORT_VL_XMIT_WAIT: "PortVLXmitWaitCounters",
    pma.ATTR_PORT_COUNTERS_EXT: "PortCountersExtended",
    0x001F: "PortExtendedSpeedsCounters",
    pma.ATTR_PORT_XMIT_DATA_SL: "PortXmitDataSL",
    pma.ATTR_PORT_RCV_DATA_SL: "PortRcvDataSL",
}


class MAD(Packet):
    """MAD common header (IBA 13.4.3), plus the 40 reserved bytes of a PerfMgt MAD (16.1.1).

    The kernel (ib_umad) overwrites the upper 32 bits of TransactionID on send, so match
    replies to requests on the low 32 bits.
    """

    name = "MAD"
    fields_desc: ClassVar[list[AnyField]] = [
        ByteField("BaseVersion", pma.BASE_VERSION),
        ByteEnumField("MgmtClass", pma.PERF_CLASS, MGMT_CLASSES),
        ByteField("ClassVersion", pma.CLASS_VERSION),
        BitField("R", 0, 1),
        BitEnumField("Method", pma.METHOD_GET, 7, METHODS),
        XShortField("Status", 0),
        XShortField("ClassSpecific", 0),
        XLongField("TransactionID", 0),
        XShortEnumField("AttributeID", 0, ATTRIBUTES),
        XShortField("Reserved", 0),
        XIntField("AttributeModifier", 0),
        # Other classes put their own header here (SMP M_Key, SA RMPP...); PerfMgt keeps it
        # reserved, and attribute data always starts at byte 64.
        ConditionalField(
            StrFixedLenField("PerfMgtReserved", b"", length=pma.DATA_OFFSET - _HEADER_SIZE),
            lambda pkt: pkt.MgmtClass == pma.PERF_CLASS,
        ),
    ]


class _Attribute(Packet):
    """PerfMgt attribute data: exactly 192 bytes, whatever the attribute defines."""

    #: Names of the fields that :func:`counters` returns, in spec order.
    counter_names: ClassVar[tuple[str, ...]] = ()

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes | None]:
        # Nothing follows attribute data inside a MAD: anything left over is padding.
        return b"", s


def _padding(used: int) -> StrFixedLenField:
    """The reserved tail that makes a layer 192 bytes after *used* bytes of fields."""
    return StrFixedLenField("Padding", b"", length=_DATA_SIZE - used)


class ClassPortInfo(_Attribute):
    """ClassPortInfo (IBA 13.4.8.1), attribute 0x0001: what the class agent supports.

    For PerfMgt the CapabilityMask bits are in IBA 16.1.3.1 (``pma.CAP_*``).  CapabilityMask2
    is the upper 27 bits and RespTimeValue the low 5 bits of data bytes 4-7.  All fields
    default to 0, as in a Get.
    """

    name = "PerfMgt ClassPortInfo"
    fields_desc: ClassVar[list[AnyField]] = [
        ByteField("BaseVersion", 0),
        ByteField("ClassVersion", 0),
        XShortField("CapabilityMask", 0),
        BitField("CapabilityMask2", 0, 27),
        BitField("RespTimeValue", 0, 5),
        # GIDs are 128-bit and conventionally printed like IPv6 addresses.
        IP6Field("RedirectGID", "::"),
        BitField("RedirectTC", 0, 8),
        BitField("RedirectSL", 0, 4),
        BitField("RedirectFL", 0, 20),
        ShortField("RedirectLID", 0),
        XShortField("RedirectP_Key", 0),
        XByteField("Reserved", 0),
        X3BytesField("RedirectQP", 0),
        XIntField("RedirectQ_Key", 0),
        IP6Field("TrapGID", "::"),
        BitField("TrapTC", 0, 8),
        BitField("TrapSL", 0, 4),
        BitField("TrapFL", 0, 20),
        ShortField("TrapLID", 0),
        XShortField("TrapP_Key", 0),
        ByteField("TrapHL", 0),
        X3BytesField("TrapQP", 0),
        XIntField("TrapQ_Key", 0),
        _padding(72),
    ]


class PortCounters(_Attribute):
    """PortCounters (IBA 16.1.3.5), attribute 0x0012: the mandatory counters.

    Data and packet counters are 32-bit, so they stick at 2^32 - 1 within seconds on a busy
    link; read PortCountersExtended for those.  PortXmitWait is valid only with
    CapabilityMask bit 12, QP1Dropped only with bit 15.
    """

    name = "PerfMgt PortCounters"
    fields_desc: ClassVar[list[AnyField]] = [
        XByteField("Reserved", 0),
        ByteField("PortSelect", 0),
        XShortField("CounterSelect", 0),
        ShortField("SymbolErrorCounter", 0),
        ByteField("LinkErrorRecoveryCounter", 0),
        ByteField("LinkDownedCounter", 0),
        ShortField("PortRcvErrors", 0),
        ShortField("PortRcvRemotePhysicalErrors", 0),
        ShortField("PortRcvSwitchRelayErrors", 0),
        ShortField("PortXmitDiscards", 0),
        ByteField("PortXmitConstraintErrors", 0),
        ByteField("PortRcvConstraintErrors", 0),
        XByteField("CounterSelect2", 0),
        BitField("LocalLinkIntegrityErrors", 0, 4),
        BitField("ExcessiveBufferOverrunErrors", 0, 4),
        ShortField("QP1Dropped", 0),
        ShortField("VL15Dropped", 0),
        IntField("PortXmitData", 0),
        IntField("PortRcvData", 0),
        IntField("PortXmitPkts", 0),
        IntField("PortRcvPkts", 0),
        IntField("PortXmitWait", 0),
        _padding(44),
    ]
    counter_names = (
        "SymbolErrorCounter",
        "LinkErrorRecoveryCounter",
        "LinkDownedCounter",
        "PortRcvErrors",
        "PortRcvRemotePhysicalErrors",
        "PortRcvSwitchRelayErrors",
        "PortXmitDiscards",
        "PortXmitConstraintErrors",
        "PortRcvConstraintErrors",
        "LocalLinkIntegrityErrors",
        "ExcessiveBufferOverrunErrors",
        "QP1Dropped",
        "VL15Dropped",
        "PortXmitData",
        "PortRcvData",
        "PortXmitPkts",
        "PortRcvPkts",
        "PortXmitWait",
    )


_PCE_DATA = (
    "PortXmitData",
    "PortRcvData",
    "PortXmitPkts",
    "PortRcvPkts",
    "PortUnicastXmitPkts",
    "PortUnicastRcvPkts",
    "PortMulticastXmitPkts",
    "PortMulticastRcvPkts",
)
_PCE_ERRORS = (
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
    "PortXmitWait",
    "QP1Dropped",
)


class PortCountersExtended(_Attribute):
    """PortCountersExtended (IBA 16.1.4.11), attribute 0x001D: 64-bit counters.

    The four unicast/multicast packet counters are valid only with CapabilityMask bit 9.
    The error counters from data byte 72 on (PortXmitWait at byte 168) and CounterSelect2
    are valid only with CapabilityMask2 bit 1; without it a PMA may leave anything there
    (ibsim leaves uninitialised memory), so gate on the capability, not on the value.
    """

    name = "PerfMgt PortCountersExtended"
    fields_desc: ClassVar[list[AnyField]] = [
        XByteField("Reserved", 0),
        ByteField("PortSelect", 0),
        XShortField("CounterSelect", 0),
        XIntField("CounterSelect2", 0),
        *(LongField(n, 0) for n in _PCE_DATA),
        *(LongField(n, 0) for n in _PCE_ERRORS),
        _padding(184),
    ]
    counter_names = _PCE_DATA + _PCE_ERRORS


class PortXmitDataSL(_Attribute):
    """PortXmitDataSL (IBA annex A13.6.4), attribute 0x0036: data sent per SL.

    Sixteen 32-bit counters in units of 4 octets, named as libibmad does (``XmtDataSL<n>``).
    No CapabilityMask bit announces it: probe with a Get.
    """

    name = "PerfMgt PortXmitDataSL"
    fields_desc: ClassVar[list[AnyField]] = [
        XByteField("Reserved", 0),
        ByteField("PortSelect", 0),
        XShortField("CounterSelect", 0),
        *(IntField(f"XmtDataSL{sl}", 0) for sl in range(16)),
        _padding(68),
    ]
    counter_names = tuple(f"XmtDataSL{sl}" for sl in range(16))


class PortRcvDataSL(_Attribute):
    """PortRcvDataSL (IBA annex A13.6.4), attribute 0x0037: data received per SL.

    Same layout as PortXmitDataSL; libibmad names the counters ``RcvDataSL<n>``.
    """

    name = "PerfMgt PortRcvDataSL"
    fields_desc: ClassVar[list[AnyField]] = [
        XByteField("Reserved", 0),
        ByteField("PortSelect", 0),
        XShortField("CounterSelect", 0),
        *(IntField(f"RcvDataSL{sl}", 0) for sl in range(16)),
        _padding(68),
    ]
    counter_names = tuple(f"RcvDataSL{sl}" for sl in range(16))


class PortVLXmitWaitCounters(_Attribute):
    """PortVLXmitWaitCounters (IBA 16.1.4), attribute 0x001C: transmit-wait ticks per VL.

    Sixteen 16-bit counters, named as libibmad does (``PortVLXmitWait<n>``).
    """

    name = "PerfMgt PortVLXmitWaitCounters"
    fields_desc: ClassVar[list[AnyField]] = [
        XByteField("Reserved", 0),
        ByteField("PortSelect", 0),
        XShortField("CounterSelect", 0),
        *(ShortField(f"PortVLXmitWait{vl}", 0) for vl in range(16)),
        _padding(36),
    ]
    counter_names = tuple(f"PortVLXmitWait{vl}" for vl in range(16))


# Requests (Get) and replies (GetResp) carry the same attribute layout, so dispatch on the
# class and attribute only; building MAD()/PortCounters() fills both fields in.
bind_layers(MAD, ClassPortInfo, MgmtClass=0x04, AttributeID=0x0001)
bind_layers(MAD, PortCounters, MgmtClass=0x04, AttributeID=0x0012)
bind_layers(MAD, PortVLXmitWaitCounters, MgmtClass=0x04, AttributeID=0x001C)
bind_layers(MAD, PortCountersExtended, MgmtClass=0x04, AttributeID=0x001D)
bind_layers(MAD, PortXmitDataSL, MgmtClass=0x04, AttributeID=0x0036)
bind_layers(MAD, PortRcvDataSL, MgmtClass=0x04, AttributeID=0x0037)


def dissect(raw: bytes | bytearray | memoryview) -> MAD:
    """Dissect one 256-byte PerfMgt MAD into :class:`MAD` / attribute layer.

    Attributes without a layer here stay ``Raw`` after the header.

    Raises:
        MadError: *raw* is shorter than the common header, is not a PerfMgt MAD, or is not
            exactly 256 bytes.
    """
    raw = bytes(raw)
    if len(raw) < _HEADER_SIZE:
        raise MadError(
            f"truncated MAD: {len(raw)} bytes, the common header alone needs {_HEADER_SIZE}"
        )
    if raw[1] != pma.PERF_CLASS or raw[0] != pma.BASE_VERSION:
        raise MadError(
            f"not a PerfMgt MAD (class 0x{raw[1]:02x}, base version {raw[0]}; "
            f"expected class 0x{pma.PERF_CLASS:02x}, base version {pma.BASE_VERSION})"
        )
    if len(raw) != pma.MAD_SIZE:
        attr_id = int.from_bytes(raw[16:18], "big")
        what = ATTRIBUTES.get(attr_id, f"attribute 0x{attr_id:04x}")
        problem = "truncated" if len(raw) < pma.MAD_SIZE else "oversized"
        raise MadError(f"{problem} {what} MAD: {len(raw)} bytes, expected {pma.MAD_SIZE}")
    return MAD(raw)


def _attribute(pkt: Packet) -> _Attribute:
    layer = pkt
    while layer:  # NoPayload is false
        if isinstance(layer, _Attribute):
            return layer
        layer = layer.payload
    if isinstance(pkt, MAD):
        attr_id = int(pkt.AttributeID)
        what = ATTRIBUTES.get(attr_id, "unknown")
        raise MadError(f"no layer for attribute 0x{attr_id:04x} ({what})")
    raise MadError(f"{pkt.name} is not a PerfMgt attribute")


def counters(pkt: Packet) -> dict[str, int]:
    """The counters of a dissected (or built) attribute, by spec field name.

    With a :class:`MAD` header, it must be a good reply: method GetResp and status 0.  A bare
    attribute layer is taken as it is.  Whether a counter is valid at all depends on the
    capability masks in ClassPortInfo (see each layer); data counters are in 4-octet units.

    Raises:
        MadError: no attribute layer with counters, or the header says this is not a good
            reply (a request, an error status).
    """
    layer = _attribute(pkt)
    mad = layer.underlayer
    if isinstance(mad, MAD):
        method = int(mad.R) << 7 | int(mad.Method)
        if method != pma.METHOD_GET_RESP:
            raise MadError(f"{layer.name}: method 0x{method:02x} is not GetResp")
        if mad.Status:
            raise MadError(f"{layer.name}: {pma.status_text(int(mad.Status))}")
    if not layer.counter_names:
        raise MadError(f"{layer.name} carries no counters")
    return {name: int(layer.getfieldval(name)) for name in layer.counter_names}
