"""What a reader sees of the point names of a figure (speed_vs_accuracy): where each name is
drawn, whether its leader line joins it to its point, and what it could be mistaken for."""

from __future__ import annotations

import math
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox


@dataclass(frozen=True)
class Name:
    """One point's name as drawn: its words' box, its point, its leader line (display px)."""

    text: str
    box: Bbox
    point: tuple[float, float]
    leader: Path | None


def drawn(fig: Figure) -> RendererBase:
    """The renderer of ``fig`` drawn once, to measure its names."""
    fig.canvas.draw()
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def names(ax: Axes, renderer: RendererBase) -> list[Name]:
    """The point names of ``ax`` as drawn (``drawn``)."""
    found = []
    for text in ax.texts:
        assert isinstance(text, Annotation)
        patch = text.arrow_patch
        leader = None
        if patch is not None and patch.get_visible():
            leader = patch.get_path().transformed(patch.get_transform())
        point = tuple(float(v) for v in ax.transData.transform(text.xy))
        box = Text.get_window_extent(text, renderer)  # the words alone
        found.append(Name(text.get_text(), box, point, leader))  # type: ignore[arg-type]
    return found


def _distance(box: Bbox, point: tuple[float, float]) -> float:
    px, py = point
    return math.hypot(max(box.x0 - px, 0.0, px - box.x1), max(box.y0 - py, 0.0, py - box.y1))


def misreadings(ax: Axes, renderer: RendererBase) -> list[str]:
    """What is wrong with the names of ``ax``, as sentences: a name outside the axes, two
    names overlapping, a name without a leader line that is as near another point as its
    own."""
    shown = names(ax, renderer)
    frame = ax.bbox
    points = {n.point for n in shown}
    wrong = []
    for i, name in enumerate(shown):
        box = name.box
        if not (frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1):
            wrong.append(f"{name.text!r} is outside its panel (x)")
        if not (frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1):
            wrong.append(f"{name.text!r} is outside its panel (y)")
        for other in shown[i + 1 :]:
            if box.overlaps(other.box):
                wrong.append(f"{name.text!r} overlaps {other.text!r}")
        if name.leader is None:
            own = _distance(box, name.point)
            nearer = [p for p in points if p != name.point and _distance(box, p) <= own]
            if nearer:
                wrong.append(f"{name.text!r} is beside another point, with no leader line")
    return wrong


def crossings(ax: Axes, renderer: RendererBase) -> list[str]:
    """The leader lines of ``ax`` drawn through another name (a crowd may need some)."""
    shown = names(ax, renderer)
    return [
        f"{name.text!r}'s leader line crosses {other.text!r}"
        for name in shown
        for other in shown
        if other is not name
        and name.leader is not None
        and name.leader.intersects_bbox(other.box.shrunk(0.9, 0.9), filled=False)
    ]
