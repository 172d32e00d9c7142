"""``dmlshim validate MODEL``: compare a model's outputs under dmlshim with onnxruntime CPU.

Exit codes: 0 every output matches the like-for-like reference, 1 some output differs, 2 bad model, bad
inputs or usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from . import validate_many
from .options import add_feature_level, add_input_shape, input_shapes
from .progress import status

if TYPE_CHECKING:
    from ..validate import ValidationReport

# Kept here (not imported from dmlshim.validate) so that building the parser does not load onnxruntime.
OPTIMIZATION_LEVEL_NAMES = ("disabled", "basic", "extended", "all")


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim validate``."""
    parser.add_argument("model", metavar="MODEL", nargs="+", help="the .onnx file(s), or folders of them")
    parser.add_argument(
        "--inputs",
        metavar="FILE.npz",
        default=None,
        help="feeds by input name (numpy.savez); random inputs of the right shapes and types when absent",
    )
    parser.add_argument(
        "--rtol",
        type=_tolerance,
        default=0.0,
        metavar="R",
        help="relative tolerance of the verdict for floating-point outputs (default 0: exact)",
    )
    parser.add_argument(
        "--atol",
        type=_tolerance,
        default=0.0,
        metavar="A",
        help="absolute tolerance of the verdict for floating-point outputs (default 0: exact)",
    )
    parser.add_argument(
        "--optimization-level",
        choices=OPTIMIZATION_LEVEL_NAMES,
        default="disabled",
        help="onnxruntime's graph optimization level on every side (onnxruntime's GraphOptimizationLevel: "
        "disabled, basic, extended, all; default disabled)",
    )
    add_feature_level(parser, "emulated")
    add_input_shape(parser)
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of random inputs (default 0)")
    parser.add_argument(
        "--clamp-indices",
        action="store_true",
        help="clamp out-of-range indices in dmlshim instead of failing (onnxruntime still fails on them)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the schema_version 2 JSON document (docs/validate.md)"
    )
    validate_many.add_arguments(parser)


def model_report(args: argparse.Namespace, model: str) -> ValidationReport:
    """Validate one model with the command line's options."""
    from ..validate import validate_model

    shapes = input_shapes(args)
    if shapes and args.inputs:
        print("dmlshim validate: note: --input-shape is ignored with --inputs", file=sys.stderr)
    report = validate_model(
        model,
        inputs=args.inputs,
        feature_level=args.feature_level,
        rtol=args.rtol,
        atol=args.atol,
        input_shapes=shapes or None,
        seed=args.seed,
        index_mode="clamp" if args.clamp_indices else "error",
        optimization_level=args.optimization_level,
    )
    return report


def run(args: argparse.Namespace) -> int:
    """Validate the model (several: see validate_many); returns the exit code."""
    from ..report.validate_report import render_json, render_text

    if validate_many.applies(args):
        return validate_many.run(args)
    with status(args, f"validate: running {args.model[0]} through dmlshim and onnxruntime CPU"):
        report = model_report(args, args.model[0])
    sys.stdout.write(render_json(report) if args.json else render_text(report))
    return report.exit_code
