"""``dmlshim inspect MODEL``: the DirectML descriptor each gather/scatter node of a model becomes.

Exit codes: 0 every node translates to DirectML, 1 some node falls back or is not translated, 2 bad model
or usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError
from ..modelcheck import unknown_operators
from ..report.inspect_report import render_json, render_text
from ..translate.shapes_info import load_model, parse_input_shape, tensor_info
from ..translate.translator import translate_model


def _feature_level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim inspect``."""
    parser.add_argument("model", metavar="MODEL", help="the .onnx file")
    parser.add_argument(
        "--feature-level",
        "-l",
        type=_feature_level,
        default=DEFAULT_FEATURE_LEVEL,
        metavar="L",
        help="target DML feature level: 3_0, 3.0, 0x3000 or DML_FEATURE_LEVEL_3_0 (default 5_0, what "
        "onnxruntime-directml requires)",
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,..",
        help="concrete shape of a graph input with symbolic or unknown dims (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the schema_version 1 JSON document")


def run(args: argparse.Namespace) -> int:
    """Inspect the model; returns the exit code."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in args.input_shape:
        name, dims = parse_input_shape(text)
        if name in shapes:
            raise BadInputError(f"--input-shape given twice for {name!r}", value=name)
        shapes[name] = dims
    model = load_model(args.model)
    translation = translate_model(model, args.feature_level, shapes)
    for unknown in unknown_operators(model):
        print(
            f"dmlshim inspect: warning: node {unknown.node!r} uses operator {unknown.qualified}, which "
            f"ONNX and onnxruntime do not define (domain {unknown.domain!r}); dmlshim run and validate "
            "will refuse this model",
            file=sys.stderr,
        )
    if args.json:
        sys.stdout.write(render_json(translation, args.model))
    else:
        initializers = {init.name for init in model.graph.initializer}
        symbolic: dict[str, tuple[object, ...]] = {}
        for value in model.graph.input:
            info = tensor_info(value)
            if value.name in initializers or value.name in shapes or info is None:
                continue
            if info.shape is not None and not info.is_static:
                symbolic[value.name] = info.shape
        npz = os.path.splitext(args.model)[0] + ".npz"
        sys.stdout.write(render_text(translation, args.model, symbolic, npz if os.path.isfile(npz) else None))
    return 0 if translation.summary["all_dml"] else 1
