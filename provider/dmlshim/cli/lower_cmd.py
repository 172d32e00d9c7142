"""``dmlshim lower MODEL -o OUT.onnx``: write the model the custom-op engine runs.

Every gather/scatter node that translates to a DirectML operator (subgraphs included) becomes an
``ai.onnx.contrib`` node carrying its descriptor, with Reshape/Cast nodes for the tensor mapping; the file
passes ``onnx.checker`` (or, where the source does not, onnxruntime loads it: the finding is a warning) and
opens in Netron. Every initializer is kept: inside the file where the source
held it, in ``OUT.data`` beside it where the source kept external data. The weights are never held
whole: the model is read without them and they are copied from the source's files a chunk at a time.
Exit codes: 0 written, 2 bad model or usage (including an existing OUT without ``--overwrite``).
"""

from __future__ import annotations

import argparse
import logging
import os

from ..execute.lowering.file import check_lowered, external_refs, write_lowered
from ..execute.lowering.lower import lower_model
from ..execute.weights.model_source import load_model
from ..fileio.files import check_output_file
from ..kernels.options import IndexMode
from ..text import printable
from .options import (
    add_feature_level,
    add_input_shape,
    apply_input_shapes,
    input_shapes,
    model_path_arg,
    output_path_arg,
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim lower``."""
    parser.add_argument("model", metavar="MODEL", type=model_path_arg, help="the .onnx file")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.onnx",
        type=output_path_arg,
        help="where to write the model",
    )
    add_feature_level(parser, "target")
    add_input_shape(
        parser,
        "NAME=D0,D1,.. a graph input's shape or SYMBOL=N a symbolic dimension's size (repeatable); the "
        "lowered model then carries static descriptors and accepts only those sizes",
    )
    parser.add_argument(
        "--clamp-indices",
        action="store_true",
        help="the custom ops clamp out-of-range indices instead of failing",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def run(args: argparse.Namespace) -> int:
    """Lower the model and write it; returns the exit code."""
    out = os.fspath(args.output)
    check_output_file(out, overwrite=args.overwrite, inputs=(args.model,))
    shapes = input_shapes(args)
    # read without its weights: they are copied from the source's files when the lowered one is written
    loaded = load_model(args.model, weightless=True, own_weights=False)
    model = loaded.proto  # its references are relative to loaded.weights_path (a link's real file)
    shapes = apply_input_shapes(model, shapes)
    lowered = lower_model(
        model,
        args.feature_level,
        input_shapes=shapes,
        index_mode=IndexMode.CLAMP if args.clamp_indices else IndexMode.ERROR,
        ort_cpu_preference=True,  # the model the custom-op engine runs
    )
    check_lowered(lowered.model, out)
    refs = external_refs(args.model)
    data_file = write_lowered(
        out,
        lowered.model,
        [r.tensor for r in refs],
        source=loaded.weights_path or args.model,
        overwrite=args.overwrite,
        inputs=(args.model, *(r.file for r in refs)),
    )

    print(
        f"{args.model}: {lowered.lowered_count} of {len(lowered.nodes)} gather/scatter nodes lowered at "
        f"{args.feature_level.dml_name}"
    )
    for node in lowered.nodes:
        if node.signature is not None:
            t = node.translation
            what = t.operator.operator_type.dml_name if t.operator else "translated at run time"
            print(
                f"  {printable(node.name)}: {node.op_type} -> {node.signature.op_type} [{node.mode}] {what}"
            )
        else:
            print(f"  {printable(node.name)}: {node.op_type} kept: {node.reason}")
    if data_file is not None:
        print(f"wrote {data_file} (the initializers {args.model} keeps as external data)")
    print(f"wrote {out} (custom domain ai.onnx.contrib; open it in Netron to read the descriptors)")
    return 0
