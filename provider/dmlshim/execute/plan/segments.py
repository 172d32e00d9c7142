"""The ONNX models the partitioned engine hands to onnxruntime: one per CPU segment, one per node that runs
alone, and the types their inputs declare.

A segment's inputs declare only what is certain. onnxruntime checks every feed against the declared rank
and fixed dimensions, so a stale shape (legacy exporters leave ``value_info`` entries that no longer match
what the graph computes) would make a segment refuse a value the whole model runs fine with. Graph inputs
keep the type the model declares (onnxruntime checks those for the whole model too); a value some node
computes declares its element type, plus the shape onnxruntime's own inference (ONNX's where onnxruntime
gives none) derives from the graph inputs and initializers alone, with the model's own ``value_info`` and
output shapes left out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import BadModelError, DmlShimError
from ...graph import CONSTANT_VALUE_ATTRIBUTES, constant_node_value
from ...model.ort_view import ort_value_types, type_from_ort
from ...model.weightless import without_weights
from ...translate import infer_shapes
from ...translate.plan import elem_type_of
from ..weights.shared import SharedWeights
from .partition import CpuSegment

logger = logging.getLogger(__name__)

SEGMENT_IR_VERSION = 10
"""IR version of the models built for CPU segments (onnxruntime 1.31 reads up to 13; onnx 1.23 writes 14)."""


def type_protos(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """The declared or inferred type of every value of a graph that has one (inputs win over value_info)."""
    types: dict[str, onnx.TypeProto] = {}
    for vi in (*graph.value_info, *graph.output, *graph.input):
        if vi.HasField("type") and vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    return types


def tensor_type(elem_type: int, dims: Sequence[int] | None) -> onnx.TypeProto:
    """A tensor type; ``dims`` None leaves the rank unknown."""
    tp = onnx.TypeProto()
    tp.tensor_type.elem_type = elem_type
    if dims is not None:
        shape = tp.tensor_type.shape
        shape.SetInParent()  # no dims: a scalar (rank 0), not an unknown rank
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return tp


def proven_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of node-computed values that follow from the graph inputs and initializers alone.

    onnxruntime's own inference (:func:`dmlshim.model.ort_view.ort_value_types`), completed by ONNX's, runs on
    a copy of the model with its ``value_info`` removed and the graph outputs' shapes cleared, so that
    nothing an exporter wrote about intermediate values (possibly stale) takes part. Empty when neither
    can run.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(without_weights(model))  # only types and shapes of large initializers matter here
    del copy.graph.value_info[:]
    for out in copy.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = infer_shapes(copy)
        onnx_view = {
            vi.name: vi.type for vi in inferred.graph.value_info if vi.type.WhichOneof("value") is not None
        }
    except DmlShimError as exc:
        logger.debug("shape inference of the value_info-free model failed: %s", exc)
        onnx_view = {}
    # onnxruntime's own inference is the authority (it types ai.onnx.ml and com.microsoft outputs that
    # ONNX's does not, and proves no static size onnxruntime never knew); ONNX's fills in the rest.
    found = dict(onnx_view)
    found.update(ort_value_types(copy, keep_annotations=False, onnx_types=onnx_view))
    return found


def boundary_types(
    names: Collection[str],
    graph: onnx.GraphProto,
    declared: Mapping[str, onnx.TypeProto],
    proven: Mapping[str, onnx.TypeProto],
) -> dict[str, onnx.TypeProto]:
    """The types segment inputs declare (see the module docstring); names with no known type are left out.

    Args:
        names: the values that cross a segment boundary.
        graph: the model's graph.
        declared: types from the model and its full shape inference (may be stale for computed values).
        proven: types from :func:`proven_types`.
    """
    graph_inputs = {v.name: v.type for v in graph.input if v.type.WhichOneof("value") is not None}
    out: dict[str, onnx.TypeProto] = {}
    for name in names:
        if name in graph_inputs:
            out[name] = graph_inputs[name]
            continue
        known = proven.get(name) or declared.get(name)
        if known is None:
            continue
        if known.WhichOneof("value") != "tensor_type":
            out[name] = known  # sequences and optionals: their element types are all there is
            continue
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = known.tensor_type.elem_type
        sure = proven.get(name)
        if sure is not None and sure.tensor_type.HasField("shape"):
            tp.tensor_type.shape.CopyFrom(sure.tensor_type.shape)
        out[name] = tp
    return out


class BoundaryTypes:
    """The types the inputs of a model's CPU segments declare, worked out when the first segment session
    is built (with the whole-model check answering, usually never).

    Args:
        model: the model.
        crossing: the values that cross a segment boundary.
        declared: types from the model and its full shape inference.
        graph_inputs: the model's input names.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        crossing: Collection[str],
        declared: Mapping[str, onnx.TypeProto],
        graph_inputs: Collection[str],
    ) -> None:
        self._model = model
        self._crossing = set(crossing)
        self._declared = declared
        self._computed = bool(self._crossing - set(graph_inputs))

    @functools.cached_property
    def strict(self) -> dict[str, onnx.TypeProto]:
        """Element type plus the shape :func:`proven_types` proves (see :func:`boundary_types`)."""
        proven = proven_types(self._model) if self._computed else {}
        return boundary_types(self._crossing, self._model.graph, self._declared, proven)

    @functools.cached_property
    def elem_only(self) -> dict[str, onnx.TypeProto]:
        """Element types only, for computed values."""
        return boundary_types(self._crossing, self._model.graph, self._declared, {})

    def relaxes(self, inputs: Sequence[str]) -> bool:
        """Whether :attr:`elem_only` declares less than :attr:`strict` for one of ``inputs``."""
        return any(self.strict.get(n) != self.elem_only.get(n) for n in inputs)


def segment_model(
    model: onnx.ModelProto,
    segment: CpuSegment,
    types: Mapping[str, onnx.TypeProto],
    init_protos: Mapping[str, onnx.TensorProto],
    shared: SharedWeights | None = None,
) -> onnx.ModelProto:
    """An ONNX model of one CPU segment: its nodes, the initializers they read, typed inputs, outputs.
    Initializers in ``shared`` appear as placeholders (the session gets their arrays)."""
    graph = model.graph
    seg = onnx.GraphProto(name=f"{graph.name or 'graph'}_cpu{segment.index}")
    seg.node.extend(graph.node[i] for i in segment.nodes)
    for name in segment.inputs:
        tp = types.get(name)
        if tp is None:
            raise BadModelError(
                f"the type of {name!r} is unknown (shape inference gave none), so CPU partition "
                f"{segment.index} cannot declare it as an input",
                tensor=name,
            )
        vi = seg.input.add()
        vi.name = name
        vi.type.CopyFrom(tp)
    for name in segment.initializers:
        tensor = init_protos[name]
        seg.initializer.append(shared.stub(tensor) if shared is not None and name in shared else tensor)
    for name in segment.outputs:
        seg.output.add().name = name
    out = onnx.ModelProto(
        ir_version=SEGMENT_IR_VERSION,
        producer_name="dmlshim",
        graph=seg,
    )
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    return out


def value_elem_and_rank(value: Any) -> tuple[int, list[None]]:
    """The ONNX element type and free dimensions of an array, or of an onnxruntime tensor OrtValue."""
    if isinstance(value, np.ndarray):
        return elem_type_of(value.dtype), [None] * value.ndim
    tp = type_from_ort(value.data_type())
    elem = tp.tensor_type.elem_type if tp is not None and tp.HasField("tensor_type") else 0
    return int(elem), [None] * len(value.shape())


def single_node_model(
    model: onnx.ModelProto, node: onnx.NodeProto, inputs: Sequence[tuple[str, np.ndarray]]
) -> onnx.ModelProto:
    """A model of one node whose inputs declare their element type only. An input may be an onnxruntime
    OrtValue (of a type numpy cannot hold, such as bfloat16). No rank is declared: the node's own model may
    leave it unknown, and onnxruntime's shape inference refuses at load what its kernel runs (GatherND of
    a rank-0 data with indices of shape [1, 0], say)."""
    graph_inputs = [
        helper.make_tensor_value_info(name, value_elem_and_rank(arr)[0], None) for name, arr in inputs
    ]
    graph = helper.make_graph(
        [node],
        f"{node.op_type}_single",
        graph_inputs,
        [onnx.ValueInfoProto(name=o) for o in node.output if o],
    )
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=SEGMENT_IR_VERSION)


def folded_constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Constant nodes with a tensor or numeric value, as initializers named after their output (a
    ``value`` tensor copied as it is stored, a ``sparse_value`` made dense: onnxruntime cannot return a
    sparse Constant's value as an output, which a segment's or the check's fetch of it is)."""
    found: dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        value = constant_node_value(node)
        if value is None:
            continue
        attr = next(a for a in node.attribute if a.name in CONSTANT_VALUE_ATTRIBUTES)
        if value.dtype == object:
            continue  # strings stay nodes
        out = node.output[0]
        tensor = onnx.TensorProto()
        if attr.name == "value":
            tensor.CopyFrom(attr.t)
        else:
            tensor = numpy_helper.from_array(value)
        tensor.name = out
        found[out] = tensor
    return found
