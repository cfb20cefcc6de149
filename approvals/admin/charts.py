"""Charts drawn on the server as SVG (no JavaScript, nothing fetched from elsewhere): a line chart of one
value or more per day, and a bar chart of counts per day, for the oversight page.

Every text that reaches the SVG — titles, the day labels, the values in each point's tooltip — goes
through `format_html`, so it is escaped like any other text of the admin's pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 12, 30  # room for the value axis on the left, the days below
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One line: its name (the legend), its CSS class, a value per day (None: no point that day)."""

    name: str
    css: str
    values: Sequence[float | None]


def seconds_text(seconds: float | None) -> str:
    """A duration as people read it: "0.8 s", "42 s", "3.5 min", "2.0 h"."""
    if seconds is None:
        return "—"
    if seconds == 0:
        return "0 s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def percent_text(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.0f}%"


def count_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def line_chart(
    *, title: str, days: Sequence[str], series: Sequence[Series], text: Callable[[float | None], str], top: float | None = None
) -> SafeString:
    """Lines over the days, one point (with a tooltip) per day that has a value; a day without one breaks
    the line. `top`: the value axis's top (else the largest value)."""
    values = [v for s in series for v in s.values if v is not None]
    top = top if top is not None else _rounded_up(max(values, default=0.0))
    x = _x_of_point(len(days))
    drawn = []
    for line in series:
        points = [(_n(x(i)), _n(_y(v, top)), days[i], v) for i, v in enumerate(line.values) if v is not None]
        segments = _segments(line.values)
        polylines = format_html_join(
            "",
            '<polyline class="line {}" points="{}"/>',
            ((line.css, " ".join(f"{_n(x(i))},{_n(_y(line.values[i], top))}" for i in run)) for run in segments if len(run) > 1),
        )
        circles = format_html_join(
            "",
            '<circle class="point {}" cx="{}" cy="{}" r="3"><title>{} {}: {}</title></circle>',
            ((line.css, px, py, line.name, day, text(value)) for px, py, day, value in points),
        )
        drawn.append(format_html('<g class="series {}">{}{}</g>', line.css, polylines, circles))
    legend = format_html_join(
        "", '<span class="legend {}">{}</span>', ((line.css, line.name) for line in series)
    )
    return _frame(title=title, days=days, x=x, top=top, text=text, body=mark_safe("".join(drawn)), legend=legend)


def bar_chart(*, title: str, days: Sequence[str], values: Sequence[int], css: str, name: str) -> SafeString:
    """A bar per day with a count above zero (with a tooltip); a day of none has no bar."""
    top = _rounded_up(max(values, default=0))
    band = PLOT_WIDTH / max(1, len(days))
    width = max(1.0, band * 0.7)
    bars = format_html_join(
        "",
        '<rect class="bar {}" x="{}" y="{}" width="{}" height="{}"><title>{} {}: {}</title></rect>',
        (
            (css, _n(LEFT + band * i + (band - width) / 2), _n(_y(v, top)), _n(width), _n(TOP + PLOT_HEIGHT - _y(v, top)),
             name, days[i], v)
            for i, v in enumerate(values)
            if v > 0
        ),
    )
    legend = format_html('<span class="legend {}">{}</span>', css, name)
    return _frame(
        title=title, days=days, x=lambda i: LEFT + band * (i + 0.5), top=top, text=count_text, body=bars, legend=legend
    )


# --------------------------------------------------------------------------- drawing


def _frame(
    *,
    title: str,
    days: Sequence[str],
    x: Callable[[int], float],
    top: float,
    text: Callable[[float | None], str],
    body: SafeString,
    legend: SafeString,
) -> SafeString:
    """The chart's frame: its title, the axes, the value axis's top and middle (unless a count's middle
    is a fraction), a few days below: the first, the middle one, the last."""
    levels = [0.0, top / 2, top] if text is not count_text or top % 2 == 0 else [0.0, top]
    ticks = format_html_join(
        "",
        '<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
        ((LEFT, _n(_y(v, top)), WIDTH - RIGHT, _n(_y(v, top)), LEFT - 6, _n(_y(v, top) + 4), text(v)) for v in levels),
    )
    shown = sorted({0, len(days) // 2, len(days) - 1}) if days else []
    anchor = {0: "start", len(days) - 1: "end"}
    day_labels = format_html_join(
        "",
        '<text class="tick" x="{}" y="{}" text-anchor="{}">{}</text>',
        ((_n(x(i)), HEIGHT - 8, anchor.get(i, "middle"), days[i]) for i in shown),
    )
    return format_html(
        '<figure class="chart"><figcaption>{} {}</figcaption>'
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="100%" role="img"><title>{}</title>'
        "{}{}{}</svg></figure>",
        title, legend, WIDTH, HEIGHT, title, ticks, day_labels, body,
    )  # fmt: skip


def _n(value: float) -> str:
    """A coordinate as written in the SVG (format_html escapes its arguments to text before formatting)."""
    return f"{value:.1f}"


def _x_of_point(count: int) -> Callable[[int], float]:
    step = PLOT_WIDTH / max(1, count - 1)
    return lambda i: LEFT + step * i if count > 1 else LEFT + PLOT_WIDTH / 2


def _y(value: float, top: float) -> float:
    return TOP + PLOT_HEIGHT * (1 - (value / top if top else 0))


def _segments(values: Sequence[float | None]) -> list[list[int]]:
    """The runs of consecutive days that have a value (each drawn as one polyline)."""
    runs: list[list[int]] = []
    for i, value in enumerate(values):
        if value is None:
            continue
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _rounded_up(value: float) -> float:
    """A round top for the value axis at or above `value` (1, 2, 5 × a power of ten); 1 for nothing."""
    if value <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 < value:
        scale *= 10
    while scale > value:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale
