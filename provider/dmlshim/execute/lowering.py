"""Lower a model for the custom-op engine: every translated gather/scatter node becomes a custom-domain node.

Each Gather, GatherElements, GatherND, Scatter, ScatterElements and ScatterND node (subgraphs of If, Loop
and Scan included) that translates to a DirectML operator is replaced by a node of the domain
``ai.onnx.contrib`` (the only domain onnxruntime-extensions' Python custom ops can live in), executed by
:mod:`dmlshim.execute.custom_op`. The custom node comes in one of two modes:

* ``descriptor``: the plan is a plain tensor mapping (no host steps, no window, no 64-bit pair view), so the
  mapping is written as ordinary ONNX nodes: ``Reshape`` from the ONNX shape to the DirectML ``Sizes``
  (and ``Cast`` where the DirectML data type differs from the ONNX one) before the custom node, which
  executes the descriptor it carries, and ``Reshape``/``Cast`` back to the ONNX output after it.
* ``translate``: the custom node takes the ONNX inputs as they are and runs the whole plan itself (host
  steps included). Nodes whose shapes are not static are lowered this way too: they are translated at run
  time from the actual arrays, and the translation is cached by shapes and types.

Every custom node carries the ONNX op type, its since_version and attributes (what a run-time translation
needs), and, when the shapes are static, the descriptor as the DxDispatch JSON string (``descriptor``) and
field by field (``dml_*`` attributes) for reading in Netron. Nodes that fall back stay as they are.

onnxruntime-extensions moves tensors of a few element types only (float16 and bfloat16 abort the process,
uint64 outputs are corrupted), so float16 travels as float32 and uint64 as int64, with ``Cast`` nodes on
the way in and out; both conversions are exact.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..dml.json_form import operator_to_json
from ..errors import DmlShimError, guard_resources
from ..graph import is_gather_scatter, node_path, subgraph_prefix, subgraphs
from ..kernels.options import IndexMode
from ..translate import NodeTranslation, Reinterpret, Status, TensorInfo, infer_shapes, translate_node
from ..translate.plan import np_dtype_of
from ..translate.shapes_info import tensor_infos
from ..translate.translator import model_opsets, node_since_version
from .fallback import rewrite_deprecated_scatter

logger = logging.getLogger(__name__)

__all__ = [
    "CUSTOM_DOMAIN",
    "CUSTOM_OPSET_VERSION",
    "DECLARED_ATTRIBUTES",
    "INDEX_TRANSPORT_TYPES",
    "MODE_DESCRIPTOR",
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

CUSTOM_DOMAIN = "ai.onnx.contrib"
"""The domain of the custom nodes (onnxruntime-extensions finds Python ops only there)."""
CUSTOM_OPSET_VERSION = 1
LOWERED_IR_VERSION = 10
"""IR version of lowered models (onnxruntime 1.31 reads up to 13; onnx 1.23 writes 14)."""

MODE_DESCRIPTOR = "descriptor"
MODE_TRANSLATE = "translate"

DECLARED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("mode", "string"),
    ("node_name", "string"),
    ("onnx_op_type", "string"),
    ("onnx_since_version", "int"),
    ("onnx_attributes", "string"),
    ("onnx_inputs", "string"),
    ("io_types", "string"),
    ("feature_level", "int"),
    ("index_mode", "string"),
    ("descriptor", "string"),
)
"""The attributes every custom node carries and the Python kernel receives (name, type); the ``dml_*`` and
``onnx_*`` copies for Netron are extra attributes the kernel never sees."""

TRANSPORT_TYPES: frozenset[int] = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.BOOL,
    }
)
"""Element types onnxruntime-extensions moves between onnxruntime and Python intact."""

_CARRIED: dict[int, int] = {TensorProto.FLOAT16: TensorProto.FLOAT, TensorProto.UINT64: TensorProto.INT64}
"""Element types that travel as another type (exact conversions both ways)."""

INDEX_TRANSPORT_TYPES: tuple[int, ...] = (TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32)
"""Element types an index tensor crosses the bridge as (ONNX int32/int64; DirectML UINT32/UINT64 too)."""

_GATHER_OPS = ("Gather", "GatherElements", "GatherND")
_SCATTER_OPS = ("Scatter", "ScatterElements", "ScatterND")


def transport_type(elem_type: int) -> int | None:
    """The element type a tensor of ``elem_type`` crosses the custom-op bridge as, or None if it cannot."""
    if elem_type in TRANSPORT_TYPES:
        return elem_type
    return _CARRIED.get(elem_type)


def _type_name(elem_type: int) -> str:
    return np_dtype_of(elem_type).name


def signature_for(op_type: str, data_type: int, index_type: int) -> CustomOpSignature:
    """The custom op a node of ``op_type`` becomes, given the bridge types of its data and indices."""
    inputs = (data_type, index_type, data_type) if op_type in _SCATTER_OPS else (data_type, index_type)
    return CustomOpSignature(
        op_type=f"Dml{op_type}_{_type_name(data_type)}_{_type_name(index_type)}",
        input_types=inputs,
        output_type=data_type,
    )


def all_signatures() -> tuple[CustomOpSignature, ...]:
    """Every custom op a lowered model can use.

    onnxruntime-extensions crashes when op types are registered after a session holding its library
    exists and that session is later destroyed, so the engine registers all of them once, up front.
    """
    return tuple(
        signature_for(op, data, index)
        for op in (*_GATHER_OPS, *_SCATTER_OPS)
        for data in sorted(TRANSPORT_TYPES)
        for index in INDEX_TRANSPORT_TYPES
    )


@dataclass(frozen=True)
class CustomOpSignature:
    """One custom op type: its name and the element types of its inputs and output on the bridge.

    Attributes:
        op_type: e.g. ``DmlGatherElements_float32_int64``.
        input_types: ONNX element types of the custom node's inputs, in order.
        output_type: ONNX element type of its output.
    """

    op_type: str
    input_types: tuple[int, ...]
    output_type: int


@dataclass(frozen=True)
class LoweredNode:
    """What lowering did with one gather/scatter node.

    Attributes:
        name: the node's display name with its subgraph path (``loop/body/scatter``).
        op_type: the ONNX op type.
        translation: the static translation (status ``error`` with ``SHAPE_UNKNOWN`` for dynamic shapes).
        mode: ``descriptor`` or ``translate`` when lowered, None when the node was kept.
        signature: the custom op the node became, None when kept.
        reason: why the node was kept (None when lowered).
    """

    name: str
    op_type: str
    translation: NodeTranslation
    mode: str | None = None
    signature: CustomOpSignature | None = None
    reason: str | None = None

    @property
    def lowered(self) -> bool:
        return self.signature is not None

    @property
    def dynamic(self) -> bool:
        """Lowered without a static translation (translated at run time)."""
        return self.lowered and self.translation.status is not Status.DML


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


class _Names:
    """Fresh value and node names, unique over the whole model (subgraphs share one namespace)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._used: set[str] = set()
        self._collect(model.graph)

    def _collect(self, graph: onnx.GraphProto) -> None:
        self._used.update(v.name for v in (*graph.input, *graph.output, *graph.value_info))
        self._used.update(t.name for t in graph.initializer)
        for node in graph.node:
            self._used.update(node.input)
            self._used.update(node.output)
            self._used.add(node.name)
            for attr in node.attribute:
                if attr.HasField("g"):
                    self._collect(attr.g)
                for g in attr.graphs:
                    self._collect(g)

    def fresh(self, stem: str) -> str:
        name = stem
        k = 0
        while name in self._used:
            k += 1
            name = f"{stem}_{k}"
        self._used.add(name)
        return name


def _onnx_attributes(node: onnx.NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        out[attr.name] = value
    return out


def _descriptor_mappable(t: NodeTranslation) -> bool:
    """Whether the plan is only a reshape (and a type change) per tensor, expressible as ONNX nodes."""
    if t.output is None or t.operator is None:
        return False
    for b in t.inputs:
        if b.host_steps or b.window is not None or b.tensor.strides is not None:
            return False
        if b.reinterpret not in (Reinterpret.NONE, Reinterpret.BOOL_AS_UINT8):
            return False
        if 0 in b.tensor.sizes or _dml_elem_type(b.tensor.data_type.numpy_dtype, b.reinterpret) is None:
            return False
    out = t.output
    if out.host_steps or out.reinterpret not in (Reinterpret.NONE, Reinterpret.BOOL_AS_UINT8):
        return False
    if tuple(out.view_shape) != tuple(out.onnx_shape) or 0 in out.tensor.sizes:
        return False
    return _dml_elem_type(out.tensor.data_type.numpy_dtype, out.reinterpret) is not None


def _dml_elem_type(dtype: np.dtype, reinterpret: Reinterpret) -> int | None:
    """The ONNX element type holding a DirectML tensor in the graph (bool stays bool), if it can cross."""
    if reinterpret is Reinterpret.BOOL_AS_UINT8:
        return TensorProto.BOOL
    try:
        elem = int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (KeyError, TypeError, ValueError):
        return None
    return elem if transport_type(elem) is not None else None


@dataclass
class _Emitter:
    """Builds the replacement nodes of one gather/scatter node inside one graph."""

    graph: onnx.GraphProto
    names: _Names
    stem: str
    nodes: list[onnx.NodeProto]

    def cast(self, value: str, from_type: int, to_type: int, what: str) -> str:
        if from_type == to_type:
            return value
        out = self.names.fresh(f"{self.stem}_{what}_{_type_name(to_type)}")
        self.nodes.append(helper.make_node("Cast", [value], [out], name=self.names.fresh(out), to=to_type))
        return out

    def reshape(self, value: str, shape: Sequence[int], what: str, output: str | None = None) -> str:
        shape_name = self.names.fresh(f"{self.stem}_{what}_shape")
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(shape, dtype=np.int64), shape_name))
        out = output or self.names.fresh(f"{self.stem}_{what}_reshaped")
        self.nodes.append(
            helper.make_node("Reshape", [value, shape_name], [out], name=self.names.fresh(f"{out}_reshape"))
        )
        return out


def _descriptor_attributes(t: NodeTranslation) -> dict[str, object]:
    """The descriptor field by field, for people reading the model (the kernel reads ``descriptor``)."""
    assert t.operator is not None
    attrs: dict[str, object] = {"dml_operator": t.operator.operator_type.dml_name}
    for field_name, tensor in t.operator.tensors().items():
        attrs[f"dml_{field_name}_DataType"] = tensor.data_type.dml_name
        attrs[f"dml_{field_name}_Sizes"] = list(tensor.sizes)
        if tensor.strides is not None:
            attrs[f"dml_{field_name}_Strides"] = list(tensor.strides)
    for field_name, value in t.operator.uints().items():
        attrs[f"dml_{field_name}"] = int(value)
    return attrs


def _lower_node(
    node: onnx.NodeProto,
    t: NodeTranslation,
    infos: Sequence[TensorInfo | None],
    since: int,
    graph: onnx.GraphProto,
    names: _Names,
    fl: FeatureLevel,
    index_mode: IndexMode,
) -> tuple[list[onnx.NodeProto], LoweredNode]:
    """The nodes replacing ``node`` and the record of the lowering (no nodes: keep it)."""
    shape_unknown = t.status is Status.ERROR and "SHAPE_UNKNOWN" in t.reason_codes
    if t.status is not Status.DML and not shape_unknown:
        codes = ", ".join(t.reason_codes) or t.status.value
        return [], LoweredNode(t.name, node.op_type, t, reason=f"not translated to DirectML ({codes})")
    onnx_types = [info.elem_type if info is not None else 0 for info in infos]
    if any(transport_type(e) is None for e in onnx_types):
        bad = ", ".join(
            f"{n}: {_type_name(e) if e else 'unknown'}"
            for n, e in zip(node.input, onnx_types, strict=False)
            if transport_type(e) is None
        )
        return [], LoweredNode(
            t.name,
            node.op_type,
            t,
            reason=f"an input type cannot cross the onnxruntime-extensions bridge or is unknown ({bad})",
        )

    stem = (node.name or node.op_type).replace("/", "_")
    emit = _Emitter(graph, names, stem, [])
    initializers_before = len(graph.initializer)
    out_name = node.output[0]
    mode = MODE_DESCRIPTOR if t.status is Status.DML and _descriptor_mappable(t) else MODE_TRANSLATE
    descriptor = json.dumps(operator_to_json(t.operator), separators=(",", ":")) if t.operator else ""

    custom_inputs: list[str] = []
    real_types: list[int] = []
    if mode == MODE_DESCRIPTOR:
        assert t.output is not None
        for b in t.inputs:
            value = node.input[b.onnx_index]
            if tuple(b.onnx_shape) != tuple(b.tensor.sizes):
                value = emit.reshape(value, b.tensor.sizes, b.binding)
            dml_type = _dml_elem_type(b.tensor.data_type.numpy_dtype, b.reinterpret)
            assert dml_type is not None  # _descriptor_mappable checked it
            value = emit.cast(value, b.onnx_elem_type, dml_type, b.binding)
            carried = transport_type(dml_type)
            assert carried is not None
            custom_inputs.append(emit.cast(value, dml_type, carried, b.binding))
            real_types.append(dml_type)
        out_dml = _dml_elem_type(t.output.tensor.data_type.numpy_dtype, t.output.reinterpret)
        assert out_dml is not None
        out_shape = tuple(t.output.tensor.sizes)
        final_shape = tuple(t.output.onnx_shape)
        out_onnx = t.output.onnx_elem_type
    else:
        for value, elem in zip(node.input, onnx_types, strict=False):
            carried = transport_type(elem)
            assert carried is not None
            custom_inputs.append(emit.cast(value, elem, carried, "in"))
            real_types.append(elem)
        out_dml = out_onnx = onnx_types[0]
        out_shape = final_shape = ()

    out_carried = transport_type(out_dml)
    assert out_carried is not None
    # The custom node's own output, then back to the ONNX output (the last node writes the original name).
    tail: list[tuple[str, object]] = []
    if mode == MODE_DESCRIPTOR and out_shape != final_shape:
        tail.append(("reshape", final_shape))
    if out_carried != out_dml:
        tail.append(("cast", out_dml))
    if out_dml != out_onnx:
        tail.append(("cast", out_onnx))
    custom_out = out_name if not tail else names.fresh(f"{stem}_dml_output")

    carried_in = _carried_types(real_types)
    signature = signature_for(node.op_type, carried_in[0], carried_in[1])
    if signature.input_types != tuple(carried_in) or signature.output_type != out_carried:
        del graph.initializer[initializers_before:]
        return [], LoweredNode(
            t.name,
            node.op_type,
            t,
            reason="the input and output types do not fit one custom op "
            f"({[_type_name(e) for e in carried_in]} -> {_type_name(out_carried)})",
        )
    if carried_in[1] not in INDEX_TRANSPORT_TYPES:
        del graph.initializer[initializers_before:]
        return [], LoweredNode(
            t.name,
            node.op_type,
            t,
            reason=f"indices of type {_type_name(carried_in[1])} cannot cross the bridge",
        )
    io: dict[str, object] = {"inputs": real_types, "output": out_dml}
    if mode == MODE_DESCRIPTOR:
        io["bindings"] = [b.binding for b in t.inputs]
    io_types = json.dumps(io)
    attrs: dict[str, object] = {
        "mode": mode,
        "node_name": t.name,
        "onnx_op_type": node.op_type,
        "onnx_since_version": int(since),
        "onnx_attributes": json.dumps(_onnx_attributes(node), sort_keys=True),
        "onnx_inputs": json.dumps(list(node.input)),
        "io_types": io_types,
        "feature_level": int(fl),
        "index_mode": index_mode.value,
        "descriptor": descriptor,
    }
    for key, value in _onnx_attributes(node).items():
        attrs[f"onnx_{key}"] = value
    if t.operator is not None:
        attrs.update(_descriptor_attributes(t))
    executes = t.operator.operator_type.dml_name if t.operator else "an operator translated at run time"
    custom = helper.make_node(
        signature.op_type,
        custom_inputs,
        [custom_out],
        name=names.fresh(f"{stem}_dml"),
        domain=CUSTOM_DOMAIN,
        doc_string=f"dmlshim: {node.op_type} node {t.name!r} executed as {executes}",
    )
    custom.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    emit.nodes.append(custom)
    current = custom_out
    for k, (kind, arg) in enumerate(tail):
        last = k == len(tail) - 1
        target = out_name if last else None
        if kind == "reshape":
            assert isinstance(arg, tuple)
            current = emit.reshape(current, arg, "output", output=target)
        else:
            assert isinstance(arg, int)
            nxt = target or names.fresh(f"{stem}_output_{_type_name(arg)}")
            emit.nodes.append(
                helper.make_node("Cast", [current], [nxt], name=names.fresh(f"{nxt}_cast"), to=arg)
            )
            current = nxt
    return emit.nodes, LoweredNode(t.name, node.op_type, t, mode=mode, signature=signature)


def _carried_types(types: Sequence[int]) -> list[int]:
    out = []
    for e in types:
        carried = transport_type(e)
        assert carried is not None
        out.append(carried)
    return out


def _walk(
    graph: onnx.GraphProto,
    prefix: str,
    scope: Mapping[str, TensorInfo],
    opsets: Mapping[str, int],
    names: _Names,
    fl: FeatureLevel,
    index_mode: IndexMode,
    found: list[LoweredNode],
) -> None:
    local = dict(scope)
    local.update(tensor_infos(graph))
    new_nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(list(graph.node)):
        name = node_path(prefix, node, index)
        replacement: list[onnx.NodeProto] = []
        if is_gather_scatter(node):
            since = node_since_version(node, opsets)
            infos = [local.get(i) if i else None for i in node.input]
            t = translate_node(node, since, infos, fl, name=name)
            replacement, record = _lower_node(node, t, infos, since, graph, names, fl, index_mode)
            found.append(record)
            logger.debug("%s: %s", name, record.mode or f"kept ({record.reason})")
        for attr_name, sub in subgraphs(node):
            _walk(sub, subgraph_prefix(name, attr_name), local, opsets, names, fl, index_mode, found)
        new_nodes.extend(replacement or [node])
    del graph.node[:]
    graph.node.extend(new_nodes)


@guard_resources("lowering the model")
def lower_model(
    model: onnx.ModelProto,
    feature_level: FeatureLevel = DEFAULT_FEATURE_LEVEL,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    index_mode: IndexMode = IndexMode.ERROR,
) -> LoweredModel:
    """Lower every translated gather/scatter node of a model (subgraphs included) to a custom-op node.

    Args:
        model: the model (not modified).
        feature_level: the target DirectML feature level.
        input_shapes: concrete shapes for graph inputs with symbolic dims (the lowered model's inputs get
            these shapes, so more nodes get a static descriptor).
        index_mode: the out-of-range policy the custom nodes apply.

    Returns:
        The lowered model (opset ``ai.onnx.contrib`` v1 added) and one entry per gather/scatter node.

    Raises:
        BadInputError: ``input_shapes`` names no graph input or has the wrong rank.
    """
    fl = FeatureLevel(feature_level)
    try:
        work = infer_shapes(model, input_shapes)
    except DmlShimError as exc:
        if input_shapes:
            raise
        logger.warning(
            "shape inference failed (%s); gather/scatter nodes will be translated at run time", exc
        )
        work = onnx.ModelProto.FromString(model.SerializeToString())
    opsets = model_opsets(work)
    names = _Names(work)
    found: list[LoweredNode] = []
    _walk(work.graph, "", {}, opsets, names, fl, IndexMode(index_mode), found)
    # The Scatter nodes kept (opset 11 and later) as the ScatterElements onnxruntime can load.
    rewrite_deprecated_scatter(work)
    if any(n.lowered for n in found) and CUSTOM_DOMAIN not in opsets:
        work.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, CUSTOM_OPSET_VERSION))
    if not 4 <= int(work.ir_version) <= 13:
        # Initializers outside the graph inputs (the Reshape shapes) need IR 4; onnxruntime reads <= 13.
        work.ir_version = LOWERED_IR_VERSION
    logger.info(
        "lowered %d of %d gather/scatter nodes at %s", sum(n.lowered for n in found), len(found), fl.dml_name
    )
    return LoweredModel(work, tuple(found), fl, IndexMode(index_mode))
