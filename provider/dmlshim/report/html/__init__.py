"""The HTML report of ``dmlshim inspect --html`` and ``dmlshim validate --html``: one self-contained page
with the model graph laid out by igraph (the ``html`` extra), each gather/scatter node coloured by where
it runs, its details on selection, and the verdict on top (docs/inspect.md, "The HTML report")."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import onnx

from ...fileio.files import PathLike, check_output_file, write_text
from .graph_view import GraphView, build_view
from .layout import Placed, layout, layout_library
from .marks import NodeMark, inspect_marks, validate_marks
from .page import PageText, render_page

__all__ = [
    "PageText",
    "check_html_target",
    "inspect_marks",
    "page_html",
    "validate_marks",
    "write_report",
]

logger = logging.getLogger(__name__)


def check_html_target(path: PathLike, *, overwrite: bool, inputs: Iterable[PathLike | None]) -> None:
    """Refuse an unusable ``--html`` target, or a missing layout library, before the work starts."""
    layout_library()
    check_output_file(path, overwrite=overwrite, inputs=inputs, what="HTML report")


def page_html(model: onnx.ModelProto, marks: Mapping[str, NodeMark], text: PageText) -> str:
    """The page for ``model`` with the gather/scatter nodes ``marks`` (by node path name)."""
    view: GraphView = build_view(model, marks)
    placed: Placed = layout(view)
    return render_page(text, view, placed, marks)


def write_report(
    path: PathLike,
    model: onnx.ModelProto,
    marks: Mapping[str, NodeMark],
    text: PageText,
    *,
    overwrite: bool = False,
    inputs: Iterable[PathLike | None] = (),
) -> Path:
    """Write the page through the careful writer; returns the path written."""
    start = time.perf_counter()
    page = page_html(model, marks, text)
    written = write_text(path, page, overwrite=overwrite, inputs=inputs, what="HTML report")
    logger.info(
        "HTML report %s: %d bytes in %.2f s", written, len(page.encode("utf-8")), time.perf_counter() - start
    )
    return written
