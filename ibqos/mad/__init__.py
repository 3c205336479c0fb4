"""InfiniBand management datagrams (MAD) that ibqos sends and reads.

- :mod:`~ibqos.mad.pma`: PerfMgt (PMA) requests built and replies decoded, with raw bytes;
- :mod:`~ibqos.mad.umad`: the libibumad transport (a umad device port);
- :mod:`~ibqos.mad.layers`: the same MADs as scapy layers, for dissection and tests
  (imported by name: scapy is slow to import and the agent's hot path does not need it).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.mad.pma import check_replies, decode, get_request, status_text
    from ibqos.mad.umad import UmadPort, check_mad_device
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".pma": ("check_replies", "decode", "get_request", "status_text"),
            ".umad": ("UmadPort", "check_mad_device"),
        },
    )

__all__ = ["UmadPort", "check_mad_device", "check_replies", "decode", "get_request", "status_text"]
