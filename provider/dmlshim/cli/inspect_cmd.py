"""``dmlshim inspect MODEL``: the DirectML descriptor each gather/scatter node of a model becomes.

Exit codes: 0 every node translates to DirectML, 1 some node falls back or is not translated, 2 bad model
or usage.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from typing import TYPE_CHECKING

import onnx

from ..errors import BadInputError, DmlShimError
from ..execute.weights.model_source import load_model as read_model
from ..model.modelcheck import unknown_operators
from ..report.inspect_json import write_json
from ..report.inspect_report import GraphValue, render_text, shape_hint
from ..translate.constant_indices import flag_constant_indices
from ..translate.model_translation import ModelTranslation, translate_model
from ..translate.ort_apply import carry_optimized_away
from ..translate.shapes_info import tensor_info
from .options import (
    add_feature_level,
    add_html,
    add_input_shape,
    apply_input_shapes,
    input_shapes,
    model_path_arg,
    path_arg,
    seed_type,
)
from .progress import file_written

if TYPE_CHECKING:  # the run's modules (engines, sessions) are imported only when inspect runs the model
    from .inspect_run import RunShapes

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim inspect``."""
    parser.add_argument("model", metavar="MODEL", type=model_path_arg, help="the .onnx file")
    add_feature_level(parser, "target")
    add_input_shape(parser)
    parser.add_argument(
        "--inputs",
        metavar="FILE.npz",
        type=path_arg,
        help="run the model on these inputs (onnxruntime CPU) and translate every gather/scatter node at "
        "the shapes the run gives; with --input-shape alone, on the inputs run would generate",
    )
    parser.add_argument(
        "--seed", type=seed_type, default=0, metavar="N", help="seed of generated inputs (default 0)"
    )
    parser.add_argument(
        "--descriptors",
        action="store_true",
        help="show each node's descriptor fields (UINT fields, Sizes, Strides, data types) in the table",
    )
    parser.add_argument("--json", action="store_true", help="print the schema_version 1 JSON document")
    add_html(parser, "runs, its details")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --html file")


def graph_values(model: onnx.ModelProto) -> tuple[list[GraphValue], list[GraphValue]]:
    """The graph's inputs (initializers excluded) and outputs."""
    initializers = {init.name for init in model.graph.initializer}

    def value(v: onnx.ValueInfoProto) -> GraphValue:
        info = tensor_info(v)
        return GraphValue(v.name, info.elem_type if info else 0, info.shape if info else None)

    inputs = [value(v) for v in model.graph.input if v.name not in initializers]
    return inputs, [value(v) for v in _inferred_outputs(model)]


def _inferred_outputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph outputs with the shapes inference gives from the (possibly overridden) input shapes; the
    declared ones where inference gives none."""
    from ..model.weightless import without_weights

    light = onnx.ModelProto()
    light.CopyFrom(without_weights(model))
    for out in light.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):  # the declared ones will do
        return list(model.graph.output)
    found = {o.name: o for o in inferred.graph.output if o.type.tensor_type.HasField("shape")}
    return [_merged(o, found.get(o.name)) for o in model.graph.output]


def _merged(declared: onnx.ValueInfoProto, inferred: onnx.ValueInfoProto | None) -> onnx.ValueInfoProto:
    """The declared output with every dimension inference made concrete (names kept elsewhere)."""
    if inferred is None:
        return declared
    if not declared.type.tensor_type.HasField("shape"):
        return inferred
    theirs = inferred.type.tensor_type.shape.dim
    ours = declared.type.tensor_type.shape.dim
    if len(theirs) != len(ours):
        return declared
    merged = onnx.ValueInfoProto()
    merged.CopyFrom(declared)
    for dim, known in zip(merged.type.tensor_type.shape.dim, theirs, strict=True):
        if known.HasField("dim_value"):
            dim.dim_value = known.dim_value
    return merged


def run(args: argparse.Namespace) -> int:
    """Inspect the model; returns the exit code."""
    # Inspect builds a few objects per node and frees nearly nothing until it ends: the cycle collector's
    # full passes over an ever larger heap would cost more than the translation (2.5x on 100,000 nodes).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _inspect(args)
    finally:
        if enabled:
            gc.enable()


def _inspect(args: argparse.Namespace) -> int:
    given = input_shapes(args)
    if args.html is not None:
        from ..report.html import check_html_target

        check_html_target(args.html, overwrite=args.overwrite, inputs=(args.model, args.inputs))
    if given and args.inputs:
        print("dmlshim inspect: note: --input-shape is ignored with --inputs", file=sys.stderr)
        given = {}
    model = _read(args.model)
    shapes = apply_input_shapes(model, given)  # a size the model contradicts is refused before any run
    ran: RunShapes | None = None
    if args.inputs or given:
        from .inspect_run import run_shapes

        ran = run_shapes(args.model, inputs=args.inputs, input_shapes=given, seed=args.seed)
    if ran is not None and ran.error:
        print(
            f"dmlshim inspect: warning: onnxruntime could not run the model on these inputs ({ran.error}); "
            "the verdicts come from static shapes",
            file=sys.stderr,
        )
    translation = flag_constant_indices(_translate(args, model, shapes, ran, bool(given)), model.graph)
    if ran is not None and not ran.error:
        ran = ran.used(translation.run_cases)
    unknown_ops = unknown_operators(model)
    for unknown in unknown_ops:
        print(
            f"dmlshim inspect: warning: node {unknown.node!r} uses operator {unknown.qualified}, which "
            f"ONNX and onnxruntime do not define (domain {unknown.domain!r}); dmlshim run and validate "
            "will refuse this model",
            file=sys.stderr,
        )
    inputs, outputs = graph_values(model)
    if args.json:
        write_json(
            translation,
            sys.stdout,
            args.model,
            graph_inputs=inputs,
            graph_outputs=outputs,
            run=ran,
            unknown_ops=unknown_ops,
        )
    if not args.json or args.html is not None:
        symbolic: dict[str, tuple[object, ...]] = {}
        for v in inputs:
            if v.name in shapes or v.shape is None:
                continue
            dims = tuple(d for d in v.shape if not (isinstance(d, str) and d in shapes))
            if any(not isinstance(d, int) for d in dims):
                symbolic[v.name] = v.shape
        if ran is not None:
            symbolic = {}  # the run fixed every size
        npz = args.inputs or os.path.splitext(args.model)[0] + ".npz"
        hint_helps = _hint_helps(args, translation, symbolic) if symbolic else False
        text = render_text(
            translation,
            args.model,
            symbolic,
            npz if os.path.isfile(npz) else None,
            graph_inputs=inputs,
            graph_outputs=outputs,
            descriptors=args.descriptors,
            hint_helps=hint_helps,
            run=ran,
            unknown_ops=unknown_ops,
        )
        if not args.json:
            sys.stdout.write(text)
        if args.html is not None:
            _write_html(args, model, translation, text)
    return 0 if translation.summary["all_dml"] else 1


def _translate(
    args: argparse.Namespace,
    model: onnx.ModelProto,
    shapes: dict[str, tuple[int, ...]],
    ran: RunShapes | None,
    overridden: bool = False,
) -> ModelTranslation:
    """The translation, at the run's shapes when there is a run: its top-level values' and body nodes'
    shapes, and the graph inputs' sizes for static inference (bodies that did not run are inferred from
    them). The nodes onnxruntime's level-1 optimizations remove are those of a session of the model as
    given, with the ``--input-shape`` sizes (``overridden``) as free-dimension overrides
    (``SessionOptions.add_free_dimension_override_by_name``), never the sizes of a run."""
    # the model as the load prepared it, unless sizes were fixed in it (fix_symbols) since
    static = translate_model(
        model,
        args.feature_level,
        shapes,
        other_domains=True,
        prepared=not shapes,
        optimized=True,
        overridden=overridden,
    )
    if ran is None or ran.error:
        return static
    initializers = {t.name for t in model.graph.initializer}
    sizes = {
        v.name: ran.value_shapes[v.name]
        for v in model.graph.input
        if v.name in ran.value_shapes and v.name not in initializers and v.type.HasField("tensor_type")
    }
    run: RunShapes = ran

    def at(given: dict[str, tuple[int, ...]]) -> ModelTranslation:
        return translate_model(
            model,
            args.feature_level,
            given,
            other_domains=True,
            value_shapes=run.value_shapes,
            run_executions=run.executions,
        )

    try:
        return carry_optimized_away(static, at({**shapes, **sizes}))
    except DmlShimError as exc:  # an input size ONNX's inference refuses: infer with the symbols then
        logger.debug("inference at the run's input sizes failed (%s); symbolic sizes instead", exc)
        return carry_optimized_away(static, at(shapes))


def _write_html(
    args: argparse.Namespace, model: onnx.ModelProto, translation: ModelTranslation, text: str
) -> None:
    from ..report.html.reports import write_inspect_report

    write_inspect_report(
        args.html, model, translation, args.model, text, overwrite=args.overwrite, inputs=(args.inputs,)
    )
    file_written(args, "inspect", "HTML report", args.html)


def _read(path: str) -> onnx.ModelProto:
    # Shapes, types and small constants are all inspect reads: the large weights stay in the model's files.
    if os.path.isdir(path):
        raise BadInputError(
            f"a folder: inspect reports on one model (dmlshim inspect {path.rstrip('/')}/MODEL.onnx); "
            f"validate takes folders (dmlshim validate {path})",
            path=path,
        )
    # A node of an operator onnxruntime does not know (a custom op) does not stop the report: it is named.
    return read_model(path, weightless=True, own_weights=False, unknown_operators_allowed=True).proto


def _unknown(translation: ModelTranslation) -> int:
    return sum(1 for n in translation.nodes if "SHAPE_UNKNOWN" in n.reason_codes)


def _hint_helps(
    args: argparse.Namespace, translation: ModelTranslation, symbolic: dict[str, tuple[object, ...]]
) -> bool:
    """Whether the ``--input-shape`` sizes ``Next:`` would suggest leave fewer nodes of unknown rank: the
    model is translated again with them (only when some node is SHAPE_UNKNOWN)."""
    before = _unknown(translation)
    if not before:
        return False
    try:
        model = _read(args.model)
        shapes = apply_input_shapes(model, {**input_shapes(args), **shape_hint(symbolic)})
        return _unknown(translate_model(model, args.feature_level, shapes)) < before
    except DmlShimError:
        return False
