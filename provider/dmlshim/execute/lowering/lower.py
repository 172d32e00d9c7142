"""Lower a model for the custom-op engine: every translated gather/scatter node becomes a custom-domain node.

Each Gather, GatherElements, GatherND, Scatter, ScatterElements and ScatterND node (subgraphs of If, Loop
and Scan included) that translates to a DirectML operator is replaced by a node of the domain
``ai.onnx.contrib`` (the only domain onnxruntime-extensions' Python custom ops can live in), executed by
:mod:`dmlshim.execute.engines.custom_op`. The custom node comes in one of three modes:

* ``descriptor``: the plan is a plain tensor mapping (no host steps, no window, no 64-bit pair view), so the
  mapping is written as ordinary ONNX nodes: ``Reshape`` from the ONNX shape to the DirectML ``Sizes``
  (and ``Cast`` where the DirectML data type differs from the ONNX one) before the custom node, which
  executes the descriptor it carries, and ``Reshape``/``Cast`` back to the ONNX output after it.
* ``translate``: the custom node takes the ONNX inputs as they are and runs the whole plan itself (host
  steps included). Nodes whose shapes are not static are lowered this way too: they are translated at run
  time from the actual arrays, and the translation is cached by shapes and types.
* ``tags`` (float16, float32, float64 data): the custom node takes data's shape (``Shape``), the indices
  and, for scatters, updates' shape; it runs the translation on element tags and returns each output
  element's position in data (then updates). ``Gather`` on data (and updates) flattened and concatenated
  moves the elements: no float ever crosses the bridge, so NaN payloads and signalling NaNs survive.

Every custom node carries the ONNX op type, its since_version and attributes (what a run-time translation
needs), and, when the shapes are static, the descriptor as the DxDispatch JSON string (``descriptor``) and
field by field (``dml_*`` attributes) for reading in Netron. Nodes that fall back stay as they are.

onnxruntime-extensions moves tensors of a few element types only; uint64 travels as int64, with ``Cast``
nodes on the way in and out (an exact conversion). Models importing ai.onnx below 5 (where ``Reshape``
takes its shape as an attribute) get no ``descriptor`` mode, and ``tags`` mode flattens with Reshape-1.
A custom op cannot return a 0-d tensor (the bridge makes it ``[1]``), so a scalar output is taken back
to rank 0 with ``Gather`` of element 0, which every opset has.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx
from onnx import helper

from ...dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ...errors import DmlShimError
from ...graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs
from ...kernels.options import IndexMode
from ...model.ort_view import ort_value_types
from ...model.prepare import prepare_model
from ...model.weightless import without_declared_shapes
from ...resources import guard_resources
from ...translate import NodeTranslation, Reason, TensorInfo, infer_shapes, translate_node
from ...translate.placement import CPU_PREFERRED_MESSAGE, REASON_CPU_PREFERRED, graph_placements
from ...translate.plan import CPU_PROVIDER, replace_translation
from ...translate.shapes_info import tensor_infos
from ...translate.translator import model_opsets, node_since_version
from ..custom_ops.types import (
    CUSTOM_DOMAIN,
    CUSTOM_OPSET_VERSION,
    DECLARED_ATTRIBUTES,
    INDEX_TRANSPORT_TYPES,
    LOWERED_IR_VERSION,
    MODE_DESCRIPTOR,
    MODE_TAGS,
    MODE_TRANSLATE,
    TRANSPORT_TYPES,
    CustomOpSignature,
    all_signatures,
    signature_for,
    transport_type,
)
from ..plan.fallback import rewrite_deprecated_scatter
from .body_outputs import BodyOutputs, body_output_types, declare_body_outputs
from .dequantized import DequantizedGather, dequantize_producers, dequantized_gather, drop_unread_dequantize
from .emitter import Names, drop_aliased_sources, names_read
from .node import LoweredNode, lower_node

logger = logging.getLogger(__name__)

__all__ = [
    "CUSTOM_DOMAIN",
    "CUSTOM_OPSET_VERSION",
    "DECLARED_ATTRIBUTES",
    "INDEX_TRANSPORT_TYPES",
    "LOWERED_IR_VERSION",
    "MODE_DESCRIPTOR",
    "MODE_TAGS",
    "MODE_TRANSLATE",
    "TRANSPORT_TYPES",
    "CustomOpSignature",
    "LoweredModel",
    "LoweredNode",
    "all_signatures",
    "lower_model",
    "signature_for",
    "transport_type",
]


@dataclass(frozen=True)
class LoweredModel:
    """A lowered model and what happened to each gather/scatter node.

    Attributes:
        model: the lowered model (a new ModelProto).
        nodes: one entry per gather/scatter node, in graph order, subgraph nodes after their owner.
        feature_level: the target feature level.
        index_mode: the out-of-range policy written into the custom nodes.
    """

    model: onnx.ModelProto
    nodes: tuple[LoweredNode, ...]
    feature_level: FeatureLevel
    index_mode: IndexMode

    @property
    def signatures(self) -> tuple[CustomOpSignature, ...]:
        """The distinct custom op types the model uses (each must be registered before a session)."""
        seen: dict[str, CustomOpSignature] = {}
        for node in self.nodes:
            if node.signature is not None:
                seen.setdefault(node.signature.op_type, node.signature)
        return tuple(seen.values())

    @property
    def lowered_count(self) -> int:
        return sum(n.lowered for n in self.nodes)


def _walk(
    graph: onnx.GraphProto,
    inferred: onnx.GraphProto | None,
    prefix: str,
    scope: Mapping[str, TensorInfo],
    opsets: Mapping[str, int],
    names: Names,
    fl: FeatureLevel,
    index_mode: IndexMode,
    found: list[LoweredNode],
    replaced: list[str],
    cpu_preference: bool = False,
    *,
    guards: bool = True,
) -> None:
    """Lower the gather/scatter nodes of ``graph`` in place. Types and shapes come from ``inferred``, the
    same graph after shape inference (None when inference failed); ``graph`` itself keeps only what the
    source declared, so onnxruntime sees the lowered model as it saw the source. With ``cpu_preference``,
    the nodes of this graph that onnxruntime's DirectML provider runs on the CPU (shape computations) are
    kept, as the partitioned engine keeps them."""
    local = dict(scope)
    local.update(tensor_infos(graph))
    if inferred is not None:
        local.update(tensor_infos(inferred))
    translated: dict[int, NodeTranslation] = {}
    dequantized_sources: set[str] = set()
    dq_producers = dequantize_producers(graph)
    for index, node in enumerate(graph.node):
        if is_gather_scatter(node):
            infos = [local.get(i) if i else None for i in node.input]
            since = node_since_version(node, opsets)
            translated[index] = translate_node(node, since, infos, fl, name=node_path(prefix, node, index))
    on_cpu = _cpu_preferred(graph, translated, local) if cpu_preference else set()
    new_nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(list(graph.node)):
        name = node_path(prefix, node, index)
        replacement: list[onnx.NodeProto] = []
        if is_gather_scatter(node):
            since = node_since_version(node, opsets)
            infos = [local.get(i) if i else None for i in node.input]
            t = translated[index]
            if index in on_cpu:
                moved = _on_cpu(t)
                replacement, record = [], LoweredNode(name, node.op_type, moved, reason=CPU_PREFERRED_MESSAGE)
            else:
                rewrite = dequantized_gather(node, graph, dq_producers, names)
                dequantized = _lower_dequantized(
                    rewrite, since, local, graph, names, fl, index_mode, opsets.get("", 0), name, guards
                )
                if rewrite is not None and dequantized is not None:
                    replacement, record = dequantized
                    dequantized_sources.add(rewrite.source)
                else:
                    replacement, record = lower_node(
                        node, t, infos, since, graph, names, fl, index_mode, opsets.get("", 0), guard=guards
                    )
            found.append(record)
            if record.lowered and not prefix:
                replaced.extend(o for o in node.output if o)
            elif record.lowered and inferred is not None:
                _declare_body_values(graph, inferred, [o for o in node.output if o])
            logger.debug("%s: %s", name, record.mode or f"kept ({record.reason})")
        twin = inferred.node[index] if inferred is not None and index < len(inferred.node) else None
        twin_subs = list(subgraphs(twin)) if twin is not None and twin.op_type == node.op_type else []
        for k, (attr_name, sub) in enumerate(subgraphs(node)):
            inferred_sub = twin_subs[k][1] if k < len(twin_subs) else None
            _walk(
                sub,
                inferred_sub,
                subgraph_prefix(name, attr_name),
                local,
                opsets,
                names,
                fl,
                index_mode,
                found,
                replaced,
                guards=guards,
            )
        new_nodes.extend(replacement or [node])
    del graph.node[:]
    graph.node.extend(new_nodes)
    if dequantized_sources:
        drop_unread_dequantize(graph, dequantized_sources, names_read(graph) | {o.name for o in graph.output})


def _lower_dequantized(
    rewrite: DequantizedGather | None,
    since: int,
    local: Mapping[str, TensorInfo],
    graph: onnx.GraphProto,
    names: Names,
    fl: FeatureLevel,
    index_mode: IndexMode,
    opset: int,
    name: str,
    guards: bool,
) -> tuple[list[onnx.NodeProto], LoweredNode] | None:
    """A gather of a per-tensor ``DequantizeLinear`` lowered on the quantized values, then dequantized
    (:mod:`.dequantized`); None when it does not apply or the gather on quantized values is kept."""
    if rewrite is None:
        return None
    gather = rewrite.gather
    infos = [local.get(i) if i else None for i in gather.input]
    t = translate_node(gather, since, infos, fl, name=name)
    replacement, record = lower_node(
        gather, t, infos, since, graph, names, fl, index_mode, opset, guard=guards
    )
    if not record.lowered:
        return None
    logger.debug("%s: gathers the quantized values, then %s dequantizes", name, rewrite.dequantize.name)
    return [*replacement, rewrite.dequantize], record


def _declare_body_values(graph: onnx.GraphProto, inferred: onnx.GraphProto, names: Sequence[str]) -> None:
    """Declare, in an If/Loop/Scan body, the outputs of a node replaced by a custom op with the type and
    shape inference gives them in the source body (where onnxruntime infers them alike: the body's values
    are not among what :func:`ort_value_types` can ask onnxruntime for).

    Downstream of an undeclared custom-op output onnxruntime knows no shape, and its fusions that need
    one stop: ``Mul(x, scalar) -> MatMul`` stays two nodes where the source's becomes a ``FusedMatMul``
    (onnxruntime's ``MatMulScaleFusion`` wants the scaled input's shape), and T5's scaled ``lm_head`` in
    optimum's merged decoder (an If) came out 3.3e-6 from onnxruntime's logits at ``extended``/``all``."""
    declared = {v.name for v in (*graph.value_info, *graph.output, *graph.input)}
    types = {v.name: v.type for v in inferred.value_info if v.name in names}
    for name in names:
        tp = types.get(name)
        if name in declared or tp is None or not _shaped(tp):
            continue
        vi = graph.value_info.add()
        vi.name = name
        vi.type.CopyFrom(tp)


def _cpu_preferred(
    graph: onnx.GraphProto, translated: Mapping[int, NodeTranslation], infos: Mapping[str, TensorInfo]
) -> set[int]:
    """The gather/scatter nodes of ``graph`` that onnxruntime's DirectML provider places on the CPU."""
    if not translated:
        return set()

    def elem_type(name: str) -> int:
        info = infos.get(name)
        return info.elem_type if info is not None else 0

    return graph_placements(graph, translated, elem_type)


def _on_cpu(t: NodeTranslation) -> NodeTranslation:
    """``t`` placed on the CPU with the reason, as :func:`dmlshim.translate.translate_model` places it."""
    reasons = tuple(r for r in t.reasons if r.code != REASON_CPU_PREFERRED)
    return replace_translation(
        t, ort_placement=CPU_PROVIDER, reasons=(*reasons, Reason(REASON_CPU_PREFERRED, CPU_PREFERRED_MESSAGE))
    )


def _fix_input_shapes(
    graph: onnx.GraphProto, inferred: onnx.GraphProto, input_shapes: Mapping[str, Sequence[int]]
) -> None:
    """Give ``graph``'s inputs named in ``input_shapes`` the fixed shapes of the inferred copy."""
    fixed = {v.name: v for v in inferred.input if v.name in input_shapes}
    for value in graph.input:
        if value.name in fixed:
            value.type.CopyFrom(fixed[value.name].type)


def _shaped(tp: onnx.TypeProto) -> bool:
    """A type onnx.checker takes for a graph output: a tensor with a shape, or any other kind."""
    kind = tp.WhichOneof("value")
    return kind is not None and (kind != "tensor_type" or tp.tensor_type.HasField("shape"))


def _declare_as_onnxruntime_saw(
    graph: onnx.GraphProto,
    source: onnx.ModelProto,
    replaced: Sequence[str],
    onnx_types: Mapping[str, onnx.TypeProto],
) -> None:
    """Declare each replaced node's output with the type and shape onnxruntime inferred in the source.

    A custom op's output has no shape to onnxruntime, and a Reshape back to the ONNX shape has a static one
    onnxruntime may never have known; either changes which fusions onnxruntime applies downstream (and so
    the last bits of float results). The declaration gives onnxruntime back exactly its own view."""
    declared = {v.name for v in (*graph.value_info, *graph.output, *graph.input)}
    wanted = [name for name in replaced if name not in declared]
    untyped = [
        o
        for o in graph.output
        if o.type.WhichOneof("value") is None
        or (o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape"))
    ]
    if not wanted and not untyped:
        return
    view = ort_value_types(source, onnx_types=onnx_types)
    for name in wanted:
        tp = view.get(name)
        if tp is not None:
            vi = graph.value_info.add()
            vi.name = name
            vi.type.CopyFrom(tp)
    # An output declared without a type or shape (onnxruntime accepts it, onnx.checker does not) gets
    # one so that the lowered file passes onnx.checker: ONNX's inference (the checker wants a shape,
    # which onnxruntime's view leaves out when unknown), else onnxruntime's, for a value ONNX cannot shape
    # (the output of a com.microsoft operator).
    for out in untyped:
        found = [tp for tp in (onnx_types.get(out.name), view.get(out.name)) if tp is not None]
        tp = next((t for t in found if _shaped(t)), found[0] if found else None)
        if tp is None:
            continue
        if out.type.WhichOneof("value") is None:
            out.type.CopyFrom(tp)
        elif tp.HasField("tensor_type") and tp.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.CopyFrom(tp.tensor_type.shape)


@guard_resources("lowering the model")
def lower_model(
    model: onnx.ModelProto,
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    index_mode: IndexMode = IndexMode.ERROR,
    ort_cpu_preference: bool = False,
    body_outputs: BodyOutputs | None = None,
    numpy_guards: bool = True,
) -> LoweredModel:
    """Lower every translated gather/scatter node of a model (subgraphs included) to a custom-op node.

    Args:
        model: the model (not modified); its local functions are expanded and its nodes sorted first
            (:func:`dmlshim.model.prepare.prepare_model`).
        feature_level: the target DirectML feature level.
        input_shapes: concrete shapes for graph inputs with symbolic dims (the lowered model's inputs get
            these shapes, so more nodes get a static descriptor).
        index_mode: the out-of-range policy the custom nodes apply.
        ort_cpu_preference: keep the top-level nodes that onnxruntime's DirectML provider runs on the CPU
            (shape computations: every input a CPU tensor, a small initializer or a graph input) as
            onnxruntime nodes, with that placement and reason (the custom-op engine's default).
        body_outputs: what onnxruntime sees for the If/Loop/Scan body outputs
            (:func:`.body_outputs.body_output_types`); by default ``model``'s own. The body outputs a
            custom node computes are declared so (a copy lowered at fed ranks passes the caller's model's).
        numpy_guards: guard the inputs of custom nodes whose shapes only the run knows against shapes
            numpy cannot hold (:mod:`.numpy_guard`). Off for a copy lowered at fed ranks: onnxruntime sees
            rank-0 declarations there and folds ``Shape`` of such a value to ``[]``.

    Returns:
        The lowered model (opset ``ai.onnx.contrib`` v1 added) and one entry per gather/scatter node.

    Raises:
        BadInputError: ``input_shapes`` names no graph input or has the wrong rank.
    """
    fl = FeatureLevel(feature_level)
    model = prepare_model(model)  # local functions expanded, nodes sorted (a no-op for loaded models)
    inferred: onnx.ModelProto | None
    try:
        # Shape inference runs on a weightless copy; its types and shapes guide the translation only.
        inferred = infer_shapes(without_declared_shapes(model), input_shapes)
    except DmlShimError as exc:
        if input_shapes:
            raise
        logger.warning(
            "shape inference failed (%s); gather/scatter nodes will be translated at run time", exc
        )
        inferred = None
    # The lowered model is the source itself, every initializer kept as the source holds it, with no
    # inferred annotation added (onnxruntime would read those as facts and fuse differently).
    work = onnx.ModelProto()
    work.CopyFrom(model)
    if input_shapes and inferred is not None:
        _fix_input_shapes(work.graph, inferred.graph, input_shapes)
    opsets = model_opsets(work)
    names = Names(work)
    found: list[LoweredNode] = []
    replaced: list[str] = []
    inferred_graph = inferred.graph if inferred is not None else None
    _walk(
        work.graph,
        inferred_graph,
        "",
        {},
        opsets,
        names,
        fl,
        IndexMode(index_mode),
        found,
        replaced,
        ort_cpu_preference,
        guards=numpy_guards,
    )
    onnx_types = (
        {
            v.name: v.type
            for v in (*inferred.graph.value_info, *inferred.graph.output)
            if v.type.WhichOneof("value") is not None
        }
        if inferred is not None
        else {}
    )
    _declare_as_onnxruntime_saw(work.graph, model, replaced, onnx_types)
    drop_aliased_sources(work.graph)
    # The Scatter nodes kept (opset 11 and later) as the ScatterElements onnxruntime can load.
    rewrite_deprecated_scatter(work)
    # a custom node's body outputs as onnxruntime sees the source's (its own output has no shape to infer)
    if any(n.lowered for n in found):
        declare_body_outputs(work, body_output_types(model) if body_outputs is None else body_outputs)
    if any(n.lowered for n in found) and CUSTOM_DOMAIN not in opsets:
        work.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, CUSTOM_OPSET_VERSION))
    if not 4 <= int(work.ir_version) <= 13:
        # Initializers outside the graph inputs (the Reshape shapes) need IR 4; onnxruntime reads <= 13.
        work.ir_version = LOWERED_IR_VERSION
    logger.info(
        "lowered %d of %d gather/scatter nodes at %s", sum(n.lowered for n in found), len(found), fl.dml_name
    )
    return LoweredModel(work, tuple(found), fl, IndexMode(index_mode))
