"""``dmlshim validate MODEL``: compare a model's outputs under dmlshim with onnxruntime CPU.

Exit codes: 0 every output matches the like-for-like reference, 1 some output differs, 2 bad model, bad
inputs or usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import InputsNotGeneratedError
from . import validate_many
from .options import (
    add_engine,
    add_feature_level,
    add_input_shape,
    add_tolerances,
    model_path_arg,
    path_arg,
    seed_type,
)
from .progress import file_written, status
from .validate_files import add_array_files, model_report

if TYPE_CHECKING:
    from ..validate import ValidationReport

# Kept here (not imported from dmlshim.validate) so that building the parser does not load onnxruntime.
OPTIMIZATION_LEVEL_NAMES = ("disabled", "basic", "extended", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim validate``."""
    parser.add_argument(
        "model", metavar="MODEL", type=model_path_arg, nargs="+", help="the .onnx file(s), or folders of them"
    )
    parser.add_argument(
        "--inputs",
        metavar="FILE.npz|DIR",
        type=path_arg,
        default=None,
        help="feeds by input name (numpy.savez), or a folder holding <model name>.npz for each model; "
        "random inputs of the right shapes and types when absent",
    )
    add_tolerances(parser, "exact against the reference; dtype-fitting against --reference-outputs")
    add_array_files(parser)
    parser.add_argument(
        "--optimization-level",
        choices=OPTIMIZATION_LEVEL_NAMES,
        default=None,
        help="onnxruntime's graph optimization level on every side (onnxruntime's GraphOptimizationLevel: "
        "disabled, basic, extended, all; default disabled, or all where onnxruntime fails the model with "
        "optimizations disabled and runs it at its default level, as the report then says)",
    )
    add_feature_level(parser, "emulated")
    add_engine(parser)
    add_input_shape(parser)
    parser.add_argument(
        "--seed", type=seed_type, default=0, metavar="N", help="seed of random inputs (default 0)"
    )
    parser.add_argument(
        "--clamp-indices",
        action="store_true",
        help="clamp out-of-range indices in dmlshim instead of failing (onnxruntime still fails on them)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the schema_version 2 JSON document (docs/validate.md)"
    )
    validate_many.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Validate the model (several: see validate_many); returns the exit code."""
    from ..report.validate_report import render_json, render_text

    if validate_many.applies(args):
        if args.save_inputs or args.save_outputs or args.reference_outputs or args.html is not None:
            from ..errors import BadInputError

            raise BadInputError(
                "--save-inputs, --save-outputs, --reference-outputs and --html take one model"
            )
        return validate_many.run(args)
    if args.inputs is not None:
        from .validate_inputs import inputs_file_of

        args.inputs = inputs_file_of(args.model[0], args.inputs)
    with status(args, f"validate: running {args.model[0]} through dmlshim and onnxruntime CPU"):
        try:
            report = model_report(args, args.model[0])
        except InputsNotGeneratedError as exc:
            if args.inputs is None:
                _name_the_file_beside(exc, args.model[0])
            raise
    text = render_text(report, args.only_problems)
    sys.stdout.write(render_json(report) if args.json else text)
    if args.html is not None:
        _write_html(args, report, text)
    return report.exit_code


def _name_the_file_beside(exc: InputsNotGeneratedError, model: str) -> None:
    """Add to the error the ``<stem>.npz`` beside the model when it holds the model's inputs (a folder's
    validation uses it on its own; one model's takes what the command line says)."""
    from .validate_inputs import sibling_inputs

    sibling, _ = sibling_inputs(model, exc)
    if sibling is not None:
        exc.message += f"; {sibling} beside the model holds its inputs: --inputs {sibling}"
        exc.args = (exc.message,)


def _write_html(args: argparse.Namespace, report: ValidationReport, text: str) -> None:
    """The HTML page of the report (the model is read again: the report keeps no graph)."""
    from ..execute.weights.model_source import load_model
    from ..report.html.reports import write_validate_report

    model = load_model(args.model[0], weightless=True).proto
    guard = (*args.model, args.inputs, args.reference_outputs)
    write_validate_report(args.html, model, report, text, overwrite=args.overwrite, inputs=guard)
    file_written(args, "validate", "HTML report", args.html)
