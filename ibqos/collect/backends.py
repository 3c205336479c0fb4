"""Opening the counter backend a configuration names (the wiring from ``collect:``).

The backends are imported only when chosen: the native one loads libibumad when it opens
its port, the perfquery one first checks for a MAD device.
"""

from __future__ import annotations

from ibqos.collect.sweep import Backend
from ibqos.config.models import CollectConfig

__all__ = ["make_backend"]


def make_backend(cfg: CollectConfig) -> Backend:
    """Open the backend *cfg* names.

    Raises:
        CollectError: it cannot work here (no MAD device, no perfquery, bad recording).
    """
    if cfg.backend == "perfquery":
        from ibqos.collect.perfquery import PerfqueryBackend
        from ibqos.mad.umad import check_mad_device

        check_mad_device()  # one line now, not one warning per perfquery process

        return PerfqueryBackend(
            workers=cfg.workers,
            per_switch=cfg.per_switch,
            xmit_wait=cfg.xmit_wait,
            vl_xmit_wait=cfg.vl_xmit_wait,
            # one process reads many ports, and each starts a MAD client: seconds, not a reply
            timeout_s=max(cfg.timeout_s, 10.0),
            sweep_timeout_s=cfg.sweep_deadline_s,
        )
    if cfg.backend == "replay":
        from ibqos.collect.replay import ReplayBackend

        assert cfg.replay_path is not None  # checked by the config
        return ReplayBackend(cfg.replay_path, loop=cfg.replay_loop)
    from ibqos.collect.native import NativeBackend

    return NativeBackend(
        cfg.ca,
        cfg.port,
        window=cfg.window,
        timeout_s=cfg.timeout_s,
        retries=cfg.retries,
        xmit_wait=cfg.xmit_wait,
        vl_xmit_wait=cfg.vl_xmit_wait,
        sweep_timeout_s=cfg.sweep_deadline_s,
        per_sl=cfg.per_sl,
        interval_s=cfg.interval_s,
    )
