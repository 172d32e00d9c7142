"""Laying out the report's graph with igraph's Sugiyama layered layout (the ``html`` extra).

igraph (C core, wheels for Linux, macOS and Windows) assigns the layers (breaking cycles with the
Eades-Lin-Smyth feedback arc set heuristic), orders each layer to reduce crossings and routes every edge
that spans layers through control points; this module only scales its coordinates to pixels.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ...errors import EngineUnavailableError
from ...extras import install_command
from .graph_view import GraphView

__all__ = ["BOX_HEIGHT", "BOX_WIDTH", "Placed", "layout", "layout_library"]

logger = logging.getLogger(__name__)

BOX_WIDTH = 168
BOX_HEIGHT = 40
_COLUMN = BOX_WIDTH + 24  # one igraph unit across
_ROW = BOX_HEIGHT + 44  # one layer down
MARGIN = 20


@dataclass(frozen=True)
class Placed:
    """Pixel positions: each node's box centre, each edge's polyline (source bottom to target top), and
    the picture's size."""

    centres: tuple[tuple[float, float], ...]
    routes: tuple[tuple[tuple[float, float], ...], ...]
    width: float
    height: float


def layout_library() -> Any:
    """The igraph module.

    Raises:
        EngineUnavailableError: igraph is not installed (the message names the extra to install).
    """
    try:
        import igraph
    except ImportError as exc:
        raise EngineUnavailableError(
            "the HTML report lays out the graph with igraph, which is not installed: "
            + install_command("html"),
            value="igraph",
        ) from exc
    if int(igraph.__version__.split(".")[0]) < 1:  # edge routing came with 1.0
        raise EngineUnavailableError(
            f"the HTML report needs igraph 1.0 or later (installed: {igraph.__version__}): "
            + install_command("html"),
            value="igraph",
        )
    return igraph


def _straight(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop the control points in the middle of a vertical run (the layout gives one per layer)."""
    out: list[tuple[float, float]] = []
    for p in points:
        if len(out) >= 2 and out[-1][0] == p[0] == out[-2][0]:
            out[-1] = p
        else:
            out.append(p)
    return out


def _layers(graph: Any) -> list[int]:
    """Each node's layer: the longest path from a source (cycles broken by igraph's feedback arc set, as
    its own layering does), except that a node nothing feeds (a Constant, a shape source) sits just above
    its first consumer instead of in the top layer with every other source, which would make the picture
    as wide as the model has constants and stretch their edges over the whole height."""
    n = graph.vcount()
    dag = graph.copy()
    dag.delete_edges(graph.feedback_arc_set(method="eades"))
    layer = [0] * n
    order = dag.topological_sorting(mode="out")
    for v in order:
        for w in dag.successors(v):
            layer[w] = max(layer[w], layer[v] + 1)
    for v in reversed(order):
        if not dag.predecessors(v) and dag.successors(v):
            layer[v] = max(0, min(layer[w] for w in dag.successors(v)) - 1)
    return layer


def layout(view: GraphView) -> Placed:
    """Lay out ``view`` top to bottom."""
    igraph = layout_library()
    graph = igraph.Graph(n=len(view.nodes), edges=list(view.edges), directed=True)
    placed = graph.layout_sugiyama(layers=_layers(graph), hgap=1, vgap=1)
    coords = [(float(x), float(y)) for x, y in placed.coords[: len(view.nodes)]]
    routing = getattr(placed, "edge_routing", None) or [[] for _ in view.edges]
    # Dummy vertices (the bends of long edges) take columns of their own, left or right of every node.
    left = min([x for x, _ in coords] + [float(p[0]) for control in routing for p in control], default=0.0)

    def px(x: float, y: float) -> tuple[float, float]:
        return (
            round(MARGIN + BOX_WIDTH / 2 + (x - left) * _COLUMN, 1),
            round(MARGIN + BOX_HEIGHT / 2 + y * _ROW, 1),
        )

    centres = tuple(px(x, y) for x, y in coords)
    routes = []
    for (a, b), control in zip(view.edges, routing, strict=True):
        middle = [px(float(x), float(y)) for x, y in control]
        (ax, ay), (bx, by) = centres[a], centres[b]
        # An edge the layout reversed to break a cycle lists its control points from the target's end.
        if middle and abs(middle[0][1] - ay) > abs(middle[-1][1] - ay):
            middle.reverse()
        start = (ax, ay + BOX_HEIGHT / 2) if by >= ay else (ax, ay - BOX_HEIGHT / 2)
        end = (bx, by - BOX_HEIGHT / 2) if by >= ay else (bx, by + BOX_HEIGHT / 2)
        routes.append(tuple(_straight([start, *middle, end])))
    points = [*centres, *(p for route in routes for p in route)]
    width = max((x for x, _ in points), default=0.0) + BOX_WIDTH / 2 + MARGIN
    height = max((y for _, y in points), default=0.0) + BOX_HEIGHT / 2 + MARGIN
    return Placed(centres, tuple(routes), width, height)
