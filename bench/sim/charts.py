"""The evaluation's SVG charts (hand-written SVG, no plotting library) and its groups of
mixes: :mod:`bench.sim.eval` writes them with ``--svg DIR``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench.sim.cells import pts
from bench.sim.run import GAP_TARGET, MAIN, MixResult


def groups(results: list[MixResult]) -> dict[str, list[MixResult]]:
    """Mixes by tree and placement, by shape, and all of them."""
    out: dict[str, list[MixResult]] = {}
    for r in results:
        out.setdefault(f"{r.mix.tree} {r.mix.placement}", []).append(r)
    for r in results:
        out.setdefault(r.mix.shape, []).append(r)
    out["all"] = list(results)
    return out


COLORS = {
    "one-vl": "#9e9e9e",
    "equal": "#4e79a7",
    "bandwidth": "#f28e2b",
    "ibqos-fixed": "#59a14f",
    "optimal": "#b07aa1",
}


def _svg(width: int, height: int, body: list[str]) -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
            f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def _axis(
    x0: float, y0: float, w: float, h: float, top: float, ticks: Sequence[float], fmt: str
) -> list[str]:
    body = [f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - h}" stroke="black"/>']
    body.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + w}" y2="{y0}" stroke="black"/>')
    for t in ticks:
        y = y0 - h * t / top
        body.append(
            f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#e0e0e0"/>'
        )
        body.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt.format(t)}</text>')
    return body


def svg_contention(results: list[MixResult]) -> str:
    """Grouped bars: mean excess slowdown (S - 1) relative to one-vl's, per policy and
    group."""
    pols = list(MAIN)
    keys = [k for k in groups(results) if any(r.contended for r in groups(results)[k])]
    data = {
        k: [
            statistics.fmean(
                (r.s(p) - 1.0) / (r.s("one-vl") - 1.0) for r in groups(results)[k] if r.contended
            )
            for p in pols
        ]
        for k in keys
    }
    top = max(1.2, max(max(v) for v in data.values()) * 1.05)
    x0, y0, h, gw = 60, 300, 240, 40 + 14 * len(pols)
    w = gw * len(keys)
    body = _axis(x0, y0, w, h, top, [i * 0.2 for i in range(int(top / 0.2) + 1)], "{:.1f}")
    body.append(
        f'<text x="{x0}" y="20" font-size="14">Excess slowdown S - 1 relative to one-vl\'s'
        " (mean over contended mixes; lower is better)</text>"
    )
    for g, k in enumerate(keys):
        gx = x0 + g * gw + 20
        for i, (p, v) in enumerate(zip(pols, data[k], strict=True)):
            bh = h * v / top
            body.append(
                f'<rect x="{gx + i * 14}" y="{y0 - bh:.1f}" width="12" height="{bh:.1f}"'
                f' fill="{COLORS[p]}"><title>{p} {k}: {v:.3f}</title></rect>'
            )
        body.append(f'<text x="{gx + 7 * len(pols)}" y="{y0 + 16}" text-anchor="middle">{k}</text>')
    for i, p in enumerate(pols):
        lx = x0 + 10 + i * 100
        body.append(f'<rect x="{lx}" y="{y0 + 34}" width="12" height="12" fill="{COLORS[p]}"/>')
        body.append(f'<text x="{lx + 16}" y="{y0 + 44}">{p}</text>')
    return _svg(x0 + w + 20, y0 + 60, body)


def svg_gap(results: list[MixResult]) -> str:
    """One bar per contended mix: ibqos's gap to the optimum (points of the best fixed
    policy's excess slowdown), with the 5-point target."""
    live = [r for r in results if r.contended]
    gaps = [min(max(r.gap(), 0.0), 10.0) for r in live]
    top = max(0.1, max(gaps, default=0.0) * 1.1)
    step = 0.05 if top <= 0.3 else 0.1 if top <= 1 else 0.5
    x0, y0, h, bw = 60, 300, 240, 22
    w = bw * len(live) + 20
    body = _axis(x0, y0, w, h, top, [i * step for i in range(int(top / step) + 1)], "{:.0%}")
    body.append(
        f'<text x="{x0}" y="20" font-size="14">ibqos-fixed\'s gap to the optimum (points of'
        " the best fixed policy's excess S - 1), per contended mix; dashed: 5 points</text>"
    )
    for i, (r, g) in enumerate(zip(live, gaps, strict=True)):
        bh = h * g / top
        x = x0 + 10 + i * bw
        color = COLORS["ibqos-fixed"] if g <= GAP_TARGET else "#e15759"
        body.append(
            f'<rect x="{x}" y="{y0 - bh:.1f}" width="{bw - 4}" height="{bh:.1f}"'
            f' fill="{color}"><title>{r.mix.name}: {pts(r.gap())}</title></rect>'
        )
        body.append(
            f'<text x="{x + bw / 2 - 2}" y="{y0 + 8}" font-size="10" text-anchor="end"'
            f' transform="rotate(-60 {x + bw / 2 - 2} {y0 + 8})">{r.mix.name}</text>'
        )
    y5 = y0 - h * GAP_TARGET / top
    body.append(
        f'<line x1="{x0}" y1="{y5:.1f}" x2="{x0 + w}" y2="{y5:.1f}" stroke="black"'
        ' stroke-dasharray="4 3"/>'
    )
    return _svg(max(x0 + w + 20, 660), y0 + 150, body)
