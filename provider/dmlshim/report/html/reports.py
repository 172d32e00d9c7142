"""The two pages: ``dmlshim inspect --html`` (the static translation) and ``dmlshim validate --html``
(the run: where each node ran and whether its output matched)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import onnx

from ...fileio.files import PathLike
from ...translate.model_translation import ModelTranslation
from ...validate import ValidationReport
from . import write_report
from .marks import inspect_marks, validate_marks
from .page import PageText

__all__ = ["write_inspect_report", "write_validate_report"]


def write_inspect_report(
    path: PathLike,
    model: onnx.ModelProto,
    translation: ModelTranslation,
    model_path: str,
    text: str,
    *,
    overwrite: bool = False,
    inputs: Iterable[PathLike | None] = (),
) -> Path:
    """Write inspect's page; ``text`` is its text report (shown folded under the picture); the page may
    replace neither the model nor any of ``inputs``."""
    from ..inspect_report import verdict_lines

    page = PageText(
        title=f"dmlshim inspect {os.path.basename(model_path)}",
        verdict=tuple(line.strip() for line in verdict_lines(translation)[1:]),
        passed=bool(translation.summary["all_dml"]),
        report=text,
    )
    marks = inspect_marks(translation.nodes)
    return write_report(path, model, marks, page, overwrite=overwrite, inputs=(model_path, *inputs))


def write_validate_report(
    path: PathLike,
    model: onnx.ModelProto,
    report: ValidationReport,
    text: str,
    *,
    overwrite: bool = False,
    inputs: Iterable[PathLike | None] = (),
) -> Path:
    """Write validate's page; ``text`` is its text report, whose first line and verdict line go on top."""
    lines = text.rstrip("\n").splitlines()
    verdict = [line for line in lines if line.startswith("verdict:")]
    page = PageText(
        title=f"dmlshim validate {os.path.basename(report.model)}",
        verdict=tuple(lines[:1] + verdict),
        passed=report.match,
        report=text,
    )
    marks = validate_marks(report)
    return write_report(path, model, marks, page, overwrite=overwrite, inputs=inputs)
