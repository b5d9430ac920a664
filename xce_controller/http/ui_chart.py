"""The status page's picture of the fleet as SVG, drawn by the controller itself: live hosts
by state stacked over the last hours, and below them a lane each for drains, losses and
notices (bars: how many began in that step).

Pure: a FleetTimeline (core/fleet.py) and the time zone's clock in, markup out. Colours are
SVG presentation attributes, not style attributes, so the page's Content-Security-Policy
(no inline style) holds; every bar and band carries a <title>, which browsers show on hover.
"""

from __future__ import annotations

import time
from html import escape

from xce_controller.core.fleet import LIVE, MARKS, FleetTimeline

WIDTH, LEFT, RIGHT = 960, 110, 12
AREA_TOP, AREA_HEIGHT = 28, 180
LANE_HEIGHT, LANE_GAP = 22, 6
COLOURS = {
    "open": "#2e7d32",
    "closed": "#9e9e9e",
    "draining": "#ef6c00",
    "lost": "#c62828",
    "expected": "#64b5f6",
    "overdue": "#8e24aa",
    "drains": "#ef6c00",
    "losses": "#c62828",
    "notices": "#1565c0",
}


def _clock(ts: float) -> str:
    return time.strftime("%H:%M", time.localtime(ts))


def _nice(value: int) -> int:
    """The axis top: the first of 1, 1.5, 2, 3, 4, 5, 6, 8 times a power of ten that is at
    least `value` (300 hosts: 300; 307: 400)."""
    scale = 1
    while True:
        for factor in (1, 1.5, 2, 3, 4, 5, 6, 8):
            top = int(factor * scale)
            if top >= max(value, 1):
                return top
        scale *= 10


def fleet_svg(t: FleetTimeline) -> str:
    plot = WIDTH - LEFT - RIGHT
    dx = plot / t.steps
    # Each step is drawn with the counts at its end: the right edge is now.
    counts = {s: t.counts[s][1:] for s in t.counts}
    totals = [sum(counts[s.value][i] for s in LIVE) for i in range(t.steps)]
    top = _nice(max(totals, default=0))
    lanes_top = AREA_TOP + AREA_HEIGHT + 34
    height = lanes_top + len(MARKS) * (LANE_HEIGHT + LANE_GAP) + 4
    now = {s.value: counts[s.value][-1] for s in LIVE}
    label = ", ".join(f"{n} {s}" for s, n in now.items() if n) or "no live hosts"
    parts = [
        f'<svg id=fleet xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'role=img aria-label="Live hosts by state over the last '
        f'{_span(t.end - t.start)}: now {escape(label)}" font-size=12 '
        f'font-family="system-ui, sans-serif">',
        _legend(now),
        _axes(t, top, plot),
        _areas(t, counts, top, dx),
    ]
    for n, kind in enumerate(MARKS):
        parts.append(_lane(t, kind, lanes_top + n * (LANE_HEIGHT + LANE_GAP), dx))
    parts.append("</svg>")
    return "".join(parts)


def _span(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:g} hours" if hours != 1 else "hour"


def _legend(now: dict[str, int]) -> str:
    out, x = ["<g id=fleet-legend>"], LEFT
    for state, n in now.items():
        out.append(
            f'<rect x="{x}" y="6" width="12" height="12" fill="{COLOURS[state]}"/>'
            f'<text x="{x + 16}" y="16" data-state="{state}">{state} {n}</text>'
        )
        x += 24 + 7 * len(f"{state} {n}") + 12
    out.append("</g>")
    return "".join(out)


def _axes(t: FleetTimeline, top: int, plot: float) -> str:
    bottom = AREA_TOP + AREA_HEIGHT
    out = ['<g id=fleet-axes fill="#555" stroke="#ccc">']
    for value in (0, top // 2, top) if top % 2 == 0 and top > 1 else (0, top):
        y = bottom - AREA_HEIGHT * value / top
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor=end stroke=none>{value}</text>'
        )
    span = t.end - t.start
    every = 1800 if span <= 2 * 3600 else 3600 if span <= 12 * 3600 else 4 * 3600
    tick = (int(t.start) // every + 1) * every
    while tick <= t.end:
        x = LEFT + plot * (tick - t.start) / span
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{AREA_TOP}" y2="{bottom + 4}"/>'
            f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor=middle stroke=none>'
            f"{_clock(tick)}</text>"
        )
        tick += every
    out.append(
        f'<text x="{LEFT - 6}" y="{AREA_TOP - 8}" text-anchor=end stroke=none>hosts</text></g>'
    )
    return "".join(out)


def _areas(t: FleetTimeline, counts: dict[str, tuple[int, ...]], top: int, dx: float) -> str:
    bottom = AREA_TOP + AREA_HEIGHT
    base = [0] * t.steps
    out = ["<g id=fleet-areas>"]
    for state in (s.value for s in LIVE):
        values = counts[state]
        if not any(values):
            continue
        upper = [b + v for b, v in zip(base, values)]
        edge = _steps(upper, top, dx, bottom) + list(reversed(_steps(base, top, dx, bottom)))
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in edge)
        out.append(
            f'<polygon data-state="{state}" data-now="{values[-1]}" points="{points}" '
            f'fill="{COLOURS[state]}" fill-opacity="0.85"><title>{state}: {values[-1]} now, '
            f"at most {max(values)}</title></polygon>"
        )
        base = upper
    out.append("</g>")
    return "".join(out)


def _steps(values: list[int], top: int, dx: float, bottom: float) -> list[tuple[float, float]]:
    """The stepped outline of a band's edge, left to right."""
    points = []
    for i, v in enumerate(values):
        y = bottom - AREA_HEIGHT * v / top
        points += [(LEFT + i * dx, y), (LEFT + (i + 1) * dx, y)]
    return points


def _lane(t: FleetTimeline, kind: str, y: float, dx: float) -> str:
    values = t.marks[kind]
    total, most = sum(values), max(values, default=0)
    out = [
        f'<g data-lane="{kind}" data-total="{total}">'
        f'<rect x="{LEFT}" y="{y}" width="{dx * t.steps:.1f}" height="{LANE_HEIGHT}" '
        f'fill="#f3f3f3"/><text x="{LEFT - 6}" y="{y + 15}" text-anchor=end '
        f'fill="#333">{kind} {total}</text>'
    ]
    for i, n in enumerate(values):
        if not n:
            continue
        h = max(3.0, LANE_HEIGHT * n / most)
        start = t.start + i * t.step
        out.append(
            f'<rect data-count="{n}" x="{LEFT + i * dx:.1f}" y="{y + LANE_HEIGHT - h:.1f}" '
            f'width="{max(dx, 2.0):.1f}" height="{h:.1f}" fill="{COLOURS[kind]}">'
            f"<title>{n} {kind} {_clock(start)}-{_clock(start + t.step)}</title></rect>"
        )
    out.append("</g>")
    return "".join(out)
