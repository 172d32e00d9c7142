"""validate's work on one model with the command line's options: the run, then what polygraphy's ``run``
offers around files of arrays (save the inputs and the outputs, compare with reference outputs from a
file, per-output tolerances, show only the problems)."""

from __future__ import annotations

import argparse
import os
import sys

from .. import portable
from ..validate import ValidationReport
from ..validate.tolerances import Tolerances
from .options import add_html, input_shapes, path_arg
from .progress import file_written


def add_array_files(parser: argparse.ArgumentParser) -> None:
    """Register ``--save-inputs``, ``--save-outputs``, ``--reference-outputs``, ``--only-problems``."""
    parser.add_argument(
        "--save-inputs",
        metavar="FILE",
        type=path_arg,
        help="write the inputs the model ran on (.npz, or polygraphy's inputs JSON for a .json name)",
    )
    parser.add_argument(
        "--save-outputs",
        metavar="FILE",
        type=path_arg,
        help="write dmlshim's outputs (.npz, or polygraphy's RunResults JSON for a .json name)",
    )
    parser.add_argument(
        "--reference-outputs",
        metavar="FILE",
        type=path_arg,
        help="also compare the outputs with these (e.g. PyTorch's): .npz by output name, or a polygraphy "
        "RunResults JSON (first runner, first iteration); a difference fails the verdict",
    )
    parser.add_argument(
        "--reference-any-dtype",
        action="store_true",
        help="with --reference-outputs: compare numbers of different dtypes by value (int32 outputs against "
        "int64 references); by default a different dtype is a mismatch",
    )
    parser.add_argument(
        "--only-problems",
        action="store_true",
        help="list only outputs that differ and nodes that need a look (text report)",
    )
    add_html(parser, "ran, its result and details")
    parser.add_argument("--overwrite", action="store_true", help="replace existing --save-* and --html files")


def check_array_targets(args: argparse.Namespace) -> None:
    """Refuse unusable ``--save-*`` targets before the (possibly long) run."""
    from ..fileio import files

    guard = (*args.model, args.inputs, args.reference_outputs)
    _one_file_each(
        {
            "--save-inputs": args.save_inputs,
            "--save-outputs": args.save_outputs,
            "--html": getattr(args, "html", None),
        }
    )
    for target in (args.save_inputs, args.save_outputs):
        if target:
            files.check_output_file(target, overwrite=args.overwrite, inputs=guard)
    if getattr(args, "html", None):
        from ..report.html import check_html_target

        check_html_target(args.html, overwrite=args.overwrite, inputs=guard)


def _one_file_each(targets: dict[str, str | None]) -> None:
    """Refuse two of the files validate writes at one path (the second would replace the first)."""
    from ..errors import BadInputError

    seen: dict[str, str] = {}
    for flag, target in targets.items():
        if not target:
            continue
        where = os.path.join(os.path.realpath(os.path.dirname(target) or "."), os.path.basename(target))
        where = portable.name_key(where)
        if where in seen:
            raise BadInputError(
                f"{seen[where]} and {flag} name the same file {target!r}; give each its own file",
                path=target,
                value=target,
                rule="each file validate writes has its own path",
            )
        seen[where] = flag


def finish(report: ValidationReport, tolerances: Tolerances, args: argparse.Namespace) -> ValidationReport:
    """Per-output tolerances and statistics, the reference outputs, then the files asked for."""
    from ..fileio.array_files import read_arrays, write_arrays
    from ..validate.external import apply_reference_outputs
    from ..validate.tolerances import apply_tolerances, device_tolerances

    if report.engine == "directml":
        tolerances = device_tolerances(report, tolerances)
    report = apply_tolerances(report, tolerances)
    if report.engine == "directml" and not report.match:
        from ..kernels.options import IndexMode
        from ..validate.directml_nodes import attribute_directml

        mode = IndexMode.CLAMP if getattr(args, "clamp_indices", False) else IndexMode.ERROR
        report = attribute_directml(report, index_mode=mode)
    if args.reference_outputs:
        reference = read_arrays(args.reference_outputs, what="reference outputs file")
        report = apply_reference_outputs(
            report,
            reference,
            args.reference_outputs,
            tolerances,
            any_dtype=getattr(args, "reference_any_dtype", False),
        )
    guard = (*args.model, args.inputs, args.reference_outputs)
    if args.save_inputs:
        from ..inputs.narrow_floats import as_file_arrays

        # bfloat16 and float8 inputs as their raw bits, which --inputs reads back as the same values
        feeds = as_file_arrays(dict(report.feeds))
        write_arrays(args.save_inputs, feeds, kind="inputs", overwrite=args.overwrite, inputs=guard)
        file_written(args, "validate", "inputs", args.save_inputs)
    if args.save_outputs:
        # bfloat16 and float8 outputs as their raw bits (uint16/uint8: what onnxruntime's run returns for a
        # float8e4m3fn output), which --reference-outputs and --inputs read back as the same values
        outputs = {
            o.name: o.dmlshim if o.dmlshim_bits is None else o.dmlshim_bits
            for o in report.outputs
            if o.dmlshim is not None
        }
        write_arrays(args.save_outputs, outputs, kind="outputs", overwrite=args.overwrite, inputs=guard)
        file_written(args, "validate", "outputs", args.save_outputs)
    return report


def model_report(args: argparse.Namespace, model: str) -> ValidationReport:
    """Validate one model with the command line's options."""
    from ..validate import validate_model
    from ..validate.tolerances import parse_tolerances

    shapes = input_shapes(args)
    if shapes and args.inputs:
        print("dmlshim validate: note: --input-shape is ignored with --inputs", file=sys.stderr)
    tolerances = parse_tolerances(args.rtol, args.atol)
    check_array_targets(args)
    report = validate_model(
        model,
        inputs=args.inputs,
        feature_level=args.feature_level,
        rtol=tolerances.rtol,
        atol=tolerances.atol,
        input_shapes=shapes or None,
        seed=args.seed,
        index_mode="clamp" if args.clamp_indices else "error",
        optimization_level=args.optimization_level,
        engine=args.engine,
    )
    return finish(report, tolerances, args)
