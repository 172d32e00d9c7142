"""``dmlshim inspect MODEL``: the DirectML descriptor each gather/scatter node of a model becomes.

Exit codes: 0 every node translates to DirectML, 1 some node falls back or is not translated, 2 bad model
or usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..modelcheck import unknown_operators
from ..report.inspect_report import render_json, render_text
from ..translate.shapes_info import load_model, tensor_info
from ..translate.translator import translate_model
from .options import add_feature_level, add_input_shape, apply_input_shapes, input_shapes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim inspect``."""
    parser.add_argument("model", metavar="MODEL", help="the .onnx file")
    add_feature_level(parser, "target")
    add_input_shape(parser)
    parser.add_argument("--json", action="store_true", help="print the schema_version 1 JSON document")


def run(args: argparse.Namespace) -> int:
    """Inspect the model; returns the exit code."""
    shapes = input_shapes(args)
    model = load_model(args.model)
    shapes = apply_input_shapes(model, shapes)
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
