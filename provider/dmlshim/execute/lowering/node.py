"""Lowering one gather/scatter node for the custom-op engine: the custom node and the ONNX nodes around it.

See :mod:`dmlshim.execute.lowering.lower` for the modes; this module emits them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...dml.enums import FeatureLevel
from ...dml.json_form import operator_to_json
from ...errors import DmlShimError
from ...kernels.options import IndexMode
from ...limits import gather_scatter_output_shape
from ...translate import NodeTranslation, Reinterpret, Status, TensorInfo
from ...translate.plan import np_dtype_of
from ...translate.runner import onnx_position
from ..custom_ops.types import (
    CUSTOM_DOMAIN,
    INDEX_TRANSPORT_TYPES,
    MODE_DESCRIPTOR,
    MODE_TAGS,
    MODE_TRANSLATE,
    CustomOpSignature,
    signature_for,
    tagged_types,
    tags_signature_for,
    transport_type,
    type_name,
)
from .emitter import RESHAPE_INPUT_SINCE, Emitter, Names, Tail, emit_tail
from .numpy_guard import GUARD_SINCE, forget_static_declaration, numpy_guard, numpy_holds

__all__ = ["LoweredNode", "lower_node"]

CAST_SINCE = 6
"""The first ai.onnx opset onnxruntime has a Cast kernel for (Cast-1 names the type as a string)."""
SLICE_INPUT_SINCE = 10
"""Slice takes starts and ends as inputs from ai.onnx opset 10 (a rank known only at run time)."""


@dataclass(frozen=True)
class LoweredNode:
    """What lowering did with one gather/scatter node.

    Attributes:
        name: the node's display name with its subgraph path (``loop/body/scatter``).
        op_type: the ONNX op type.
        translation: the static translation (status ``error`` with ``SHAPE_UNKNOWN`` for dynamic shapes).
        mode: ``descriptor``, ``translate`` or ``tags`` when lowered, None when the node was kept.
        signature: the custom op the node became, None when kept.
        reason: why the node was kept (None when lowered).
    """

    name: str
    op_type: str
    translation: NodeTranslation
    mode: str | None = None
    signature: CustomOpSignature | None = None
    reason: str | None = None
    guards: tuple[str, ...] = ()
    """The guard Reshapes before the custom node (:mod:`.numpy_guard`) by node name, then their code."""

    @property
    def lowered(self) -> bool:
        return self.signature is not None

    @property
    def dynamic(self) -> bool:
        """Lowered without a static translation (translated at run time)."""
        return self.lowered and self.translation.status is not Status.DML


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


def _kept(t: NodeTranslation, node: onnx.NodeProto, reason: str) -> tuple[list[onnx.NodeProto], LoweredNode]:
    return [], LoweredNode(t.name, node.op_type, t, reason=reason)


def _reduces(node: onnx.NodeProto) -> bool:
    return any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute)


def _output_rank(node: onnx.NodeProto, t: NodeTranslation, infos: Sequence[TensorInfo | None]) -> int | None:
    """The ONNX output's rank when it is known (a custom op cannot return rank 0: it must be restored)."""
    if t.output is not None:
        return len(t.output.onnx_shape)
    shapes = [info.shape if info is not None else None for info in infos]
    if any(s is None for s in shapes[:2]):
        return None
    dims = [tuple(d if isinstance(d, int) else 1 for d in s) for s in shapes if s is not None]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "GatherND" and not isinstance((shapes[1] or (None,))[-1], int):
        return None  # the tuple size decides the rank
    try:
        out = gather_scatter_output_shape(node.op_type, attrs, dims)
    except (DmlShimError, ValueError, IndexError, KeyError):
        return None
    return None if out is None else len(out)


def _mode(node: onnx.NodeProto, t: NodeTranslation, data_type: int, opset: int) -> str:
    if data_type in tagged_types() and not _reduces(node):
        return MODE_TAGS
    if t.status is Status.DML and _descriptor_mappable(t) and opset >= RESHAPE_INPUT_SINCE:
        return MODE_DESCRIPTOR
    return MODE_TRANSLATE


def lower_node(
    node: onnx.NodeProto,
    t: NodeTranslation,
    infos: Sequence[TensorInfo | None],
    since: int,
    graph: onnx.GraphProto,
    names: Names,
    fl: FeatureLevel,
    index_mode: IndexMode,
    opset: int,
    *,
    guard: bool = True,
) -> tuple[list[onnx.NodeProto], LoweredNode]:
    """The nodes replacing ``node`` and the record of the lowering (no nodes: keep it); with ``guard``,
    inputs whose shape only the run knows pass a guard first (:mod:`.numpy_guard`)."""
    shape_unknown = t.status is Status.ERROR and "SHAPE_UNKNOWN" in t.reason_codes
    if t.status is not Status.DML and not shape_unknown:
        codes = ", ".join(t.reason_codes) or t.status.value
        return _kept(t, node, f"not translated to DirectML ({codes})")
    onnx_types = [info.elem_type if info is not None else 0 for info in infos]
    mode = _mode(node, t, onnx_types[0], opset)
    # Tags mode hands only the indices to the custom op; the other modes every input.
    crossing = onnx_types[1:2] if mode == MODE_TAGS else onnx_types
    if any(transport_type(e) is None for e in crossing):
        bad = ", ".join(
            f"{n}: {type_name(e) if e else 'unknown'}"
            for n, e in zip(node.input, onnx_types, strict=False)
            if transport_type(e) is None
        )
        return _kept(
            t, node, f"an input type cannot cross the onnxruntime-extensions bridge or is unknown ({bad})"
        )

    stem = (node.name or node.op_type).replace("/", "_")
    emit = Emitter(graph, names, stem, [], opset)
    initializers_before = len(graph.initializer)
    out_name = node.output[0]
    rank = _output_rank(node, t, infos)
    scalar = rank == 0
    # inputs of unknown rank: the output may be a scalar, which the bridge returns as [1]
    ranked = rank is None and node.op_type in ("Gather", "GatherND")
    if ranked and opset < SLICE_INPUT_SINCE:
        return _kept(
            t,
            node,
            "its inputs' ranks are unknown, so its output may be a scalar, which a custom op returns as "
            "[1]; the rank is restored with Slice, which takes its ends as an input from ai.onnx "
            f"{SLICE_INPUT_SINCE} (the model imports {opset})",
        )
    io: dict[str, object] = {"inputs": list(onnx_types), "output": onnx_types[0]}
    if mode == MODE_TAGS:
        index_carried = transport_type(onnx_types[1])
        assert index_carried is not None
        signature = tags_signature_for(node.op_type, index_carried)
        custom_inputs = [
            emit.shape(node.input[0], "data"),
            emit.cast(node.input[1], onnx_types[1], index_carried, "in"),
        ]
        if len(node.input) > 2:
            custom_inputs.append(emit.shape(node.input[2], "updates"))
        custom_out = names.fresh(f"{stem}_positions")
    else:
        lowered = _plain_inputs(node, t, onnx_types, mode, emit)
        custom_inputs, real_types, out_dml, tail = lowered
        io = {"inputs": real_types, "output": out_dml}
        if mode == MODE_DESCRIPTOR:
            io["bindings"] = [b.binding for b in t.inputs]
            # where an error found at IndicesTensor[...] lies in the ONNX indices (a plain reshape of them)
            indices = next((b for b in t.inputs if b.binding == "IndicesTensor"), None)
            if (
                indices is not None
                and onnx_position(indices, [0] * indices.tensor.dimension_count) is not None
            ):
                io["indices_shape"] = [int(d) for d in indices.onnx_shape]
        out_carried = transport_type(out_dml)
        assert out_carried is not None
        carried_in = _carried_types(real_types)
        signature = signature_for(node.op_type, carried_in[0], carried_in[1])
        if signature.input_types != tuple(carried_in) or signature.output_type != out_carried:
            del graph.initializer[initializers_before:]
            return _kept(
                t,
                node,
                "the input and output types do not fit one custom op "
                f"({[type_name(e) for e in carried_in]} -> {type_name(out_carried)})",
            )
        if scalar and mode == MODE_TRANSLATE:
            tail.insert(0, ("scalar", None))
        if ranked and mode == MODE_TRANSLATE:
            tail.insert(0, ("rank", node))
        if out_carried != out_dml:
            tail.append(("cast", (out_carried, out_dml)))
        custom_out = out_name if not tail else names.fresh(f"{stem}_dml_output")
    if signature.input_types[1] not in INDEX_TRANSPORT_TYPES:
        del graph.initializer[initializers_before:]
        return _kept(
            t, node, f"indices of type {type_name(signature.input_types[1])} cannot cross the bridge"
        )

    guards: list[str] = []
    if guard and mode != MODE_DESCRIPTOR and opset >= GUARD_SINCE:
        # shapes known only at run time: numpy (in onnxruntime-extensions' C++) must be able to hold them
        code = names.guard_code()
        for i in (1,) if mode == MODE_TAGS else range(len(custom_inputs)):
            itemsize = np_dtype_of(signature.input_types[i]).itemsize
            info = infos[i] if i < len(infos) else None
            if info is not None and info.is_static and numpy_holds(info.static_shape, itemsize):
                continue
            forget_static_declaration(graph, custom_inputs[i])
            custom_inputs[i], reshape = numpy_guard(emit, custom_inputs[i], itemsize, code)
            guards.append(reshape)
        guards.append(str(code))

    custom = helper.make_node(
        signature.op_type,
        custom_inputs,
        [custom_out],
        name=names.fresh(f"{stem}_dml"),
        domain=CUSTOM_DOMAIN,
        doc_string=f"dmlshim: {node.op_type} node {t.name!r} executed as "
        + (t.operator.operator_type.dml_name if t.operator else "an operator translated at run time"),
    )
    custom.attribute.extend(
        helper.make_attribute(k, v)
        for k, v in _custom_attributes(node, t, since, mode, io, fl, index_mode).items()
    )
    emit.nodes.append(custom)
    if opset < CAST_SINCE and any(n.op_type == "Cast" for n in emit.nodes):
        del graph.initializer[initializers_before:]
        return _kept(
            t,
            node,
            f"its {type_name(onnx_types[0])} data crosses the bridge as another type, which needs a Cast; "
            f"the model imports ai.onnx {opset} and onnxruntime has no Cast before opset {CAST_SINCE}",
        )
    if mode == MODE_TAGS:
        positions = emit.scalar(custom_out, "positions") if scalar else custom_out
        positions = emit.to_output_rank(positions, node) if ranked else positions
        source = emit.reshape(node.input[0], [-1], "data")
        if len(node.input) > 2:
            source = emit.concat([source, emit.reshape(node.input[2], [-1], "updates")], "elements")
        emit.gather(source, positions, out_name)
    else:
        emit_tail(emit, custom_out, tail, out_name)
    lowered_node = LoweredNode(t.name, node.op_type, t, mode=mode, signature=signature, guards=tuple(guards))
    return emit.nodes, lowered_node


"""The steps from the custom node's output back to the ONNX output: ("reshape", shape), ("cast", (from,
to)) or ("scalar", None)."""


def _plain_inputs(
    node: onnx.NodeProto, t: NodeTranslation, onnx_types: Sequence[int], mode: str, emit: Emitter
) -> tuple[list[str], list[int], int, Tail]:
    """Descriptor and translate modes: the custom node's inputs, their real types, its output's real type,
    and the way back to the ONNX output."""
    custom_inputs: list[str] = []
    real_types: list[int] = []
    tail: Tail = []
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
        if tuple(t.output.tensor.sizes) != tuple(t.output.onnx_shape):
            tail.append(("reshape", tuple(t.output.onnx_shape)))
        if out_dml != t.output.onnx_elem_type:
            tail.append(("cast", (out_dml, t.output.onnx_elem_type)))
        return custom_inputs, real_types, out_dml, tail
    for value, elem in zip(node.input, onnx_types, strict=False):
        carried = transport_type(elem)
        assert carried is not None
        custom_inputs.append(emit.cast(value, elem, carried, "in"))
        real_types.append(elem)
    return custom_inputs, real_types, onnx_types[0], tail


def _custom_attributes(
    node: onnx.NodeProto,
    t: NodeTranslation,
    since: int,
    mode: str,
    io: Mapping[str, object],
    fl: FeatureLevel,
    index_mode: IndexMode,
) -> dict[str, object]:
    descriptor = json.dumps(operator_to_json(t.operator), separators=(",", ":")) if t.operator else ""
    onnx_attrs = _onnx_attributes(node)
    attrs: dict[str, object] = {
        "mode": mode,
        "node_name": t.name,
        "onnx_op_type": node.op_type,
        "onnx_since_version": int(since),
        "onnx_attributes": json.dumps(onnx_attrs, sort_keys=True),
        "onnx_inputs": json.dumps(list(node.input)),
        "io_types": json.dumps(io),
        "feature_level": int(fl),
        "index_mode": index_mode.value,
        "descriptor": descriptor,
    }
    for key, value in onnx_attrs.items():
        attrs[f"onnx_{key}"] = value
    if t.operator is not None:
        attrs.update(_descriptor_attributes(t))
    return attrs


def _carried_types(types: Sequence[int]) -> list[int]:
    out = []
    for e in types:
        carried = transport_type(e)
        assert carried is not None
        out.append(carried)
    return out
