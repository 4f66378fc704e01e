"""Inline SVG charts for the status page: drawn on the server, no script, no fonts to fetch.

`line_chart` draws one series over time (gaps where a value is None), with a grid,
axis labels and an optional dashed limit line; the <svg> carries what it draws as
data attributes (`data-points`, `data-last`) so a browser test can check it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from html import escape

WIDTH, HEIGHT = 520, 180
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 12, 26
GRID_LINES = 4
NICE_STEPS = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
Units = Mapping[str, float]
BYTES: Units = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
SECONDS: Units = {"s": 1, "min": 60, "h": 3600, "d": 86400}
PLAIN: Units = {"": 1}


def axis_unit(peak: float, units: Units = PLAIN) -> tuple[str, float]:
    """The largest of `units` that `peak` reaches (the first when none)."""
    fitting = [(size, name) for name, size in units.items() if size <= peak]
    size, name = max(fitting) if fitting else min((s, n) for n, s in units.items())
    return name, size


def nice_top(peak: float, units: Units = PLAIN) -> float:
    """An axis top a little above `peak` whose GRID_LINES steps are round numbers of
    its unit (bytes in MiB, durations in minutes, ...)."""
    if peak <= 0:
        return 1.0
    _, unit = axis_unit(peak, units)
    step = peak * 1.04 / GRID_LINES / unit
    power = 10 ** math.floor(math.log10(step))
    nice = next(n for n in NICE_STEPS if n * power >= step * (1 - 1e-9))
    return nice * power * unit * GRID_LINES


def _clock(ts: float, span: float) -> str:
    moment = datetime.fromtimestamp(ts)
    return moment.strftime("%H:%M:%S" if span < 600 else "%H:%M" if span < 86400 else "%d %b %H:%M")


def _segments(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """Runs of points between gaps (None values)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]


def _coords(run: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in run)


def line_chart(
    chart_id: str,
    title: str,
    times: Sequence[float],
    values: Sequence[float | None],
    fmt: Callable[[float], str],
    *,
    color: str = "#2563eb",
    top: float | None = None,
    units: Units | None = None,
    limit: float | None = None,
    limit_label: str = "",
    area: bool = True,
) -> str:
    """One series over time as an <svg> (see the module docstring). Ticks are `fmt` of
    their values, or with `units` (BYTES, SECONDS) round numbers of one unit."""
    known = [v for v in values if v is not None]
    peak = max([*known, limit or 0.0, 0.0])
    y_top = top if top is not None else nice_top(peak, units or PLAIN)
    tick = fmt
    if units:  # ticks in one unit: 0, 6, 12, 18, 24 MiB
        name, size = axis_unit(y_top, units)

        def tick(value: float) -> str:
            return f"{value / size:.3g} {name}"

    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    t0, t1 = (times[0], times[-1]) if times else (0.0, 1.0)
    span = max(t1 - t0, 1e-9)

    def x_of(t: float) -> float:
        return LEFT + (plot_w * (t - t0) / span if len(times) > 1 else plot_w / 2)

    def y_of(v: float) -> float:
        return TOP + plot_h * (1 - min(v, y_top) / y_top)

    last = known[-1] if known else None
    parts = [
        f'<svg id="{escape(chart_id)}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(title)}" data-points="{len(known)}" '
        f'data-last="{"" if last is None else last}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for i in range(GRID_LINES + 1):
        value = y_top * i / GRID_LINES
        y = y_of(value)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/>')  # fmt: skip
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(tick(value))}</text>")  # fmt: skip
    if times:
        for t, anchor in ((t0, "start"), (t1, "end")) if len(times) > 1 else ((t0, "middle"),):
            parts.append(f'<text class="tick" x="{x_of(t):.1f}" y="{HEIGHT - 8}" '
                         f'text-anchor="{anchor}">{_clock(t, span)}</text>')  # fmt: skip
    if limit is not None and limit > 0:
        y = y_of(limit)
        parts.append(f'<line class="limit" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/><text class="limit-label" x="{WIDTH - RIGHT - 4}" '
                     f'y="{y - 5:.1f}" text-anchor="end">{escape(limit_label)}</text>')  # fmt: skip
    points = [(x_of(t), None if v is None else y_of(v)) for t, v in zip(times, values, strict=True)]
    base = y_of(0)
    for run in _segments(points):
        if area and len(run) > 1:
            outline = f"{run[0][0]:.1f},{base:.1f} {_coords(run)} {run[-1][0]:.1f},{base:.1f}"
            parts.append(f'<polygon class="area" points="{outline}" fill="{color}"/>')
        parts.append(f'<polyline class="line" points="{_coords(run)}" stroke="{color}"/>')
        if len(run) == 1:  # a value between two gaps: a dot, or it would not show
            x, y = run[0]
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
    if known:
        x, y = next((x, y) for x, y in reversed(points) if y is not None)
        parts.append(f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
    else:
        parts.append(f'<text class="empty" x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
                     'text-anchor="middle">collecting samples…</text>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def meter(chart_id: str, fraction: float | None, color: str = "#2563eb") -> str:
    """A horizontal fill bar (store size against its cap); empty without a cap."""
    width = 0.0 if fraction is None else max(0.0, min(fraction, 1.0)) * 100
    shade = "#dc2626" if fraction is not None and fraction > 0.95 else color
    return (
        f'<svg id="{escape(chart_id)}" class="meter" viewBox="0 0 100 6" '
        f'preserveAspectRatio="none" data-fraction="{"" if fraction is None else fraction}" '
        'xmlns="http://www.w3.org/2000/svg">'
        f'<rect class="meter-bg" width="100" height="6" rx="3"/>'
        f'<rect width="{width:.2f}" height="6" rx="3" fill="{shade}"/></svg>'
    )
