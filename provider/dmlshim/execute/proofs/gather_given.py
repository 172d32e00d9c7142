"""A gather's output taken as onnxruntime computed it in the whole-model check (issue 22: each
emulated node computed once per run; issue 36: small gathers too, so that a run costs what the nodes
needing work cost).

For indices that are all in ``[0, dim)``, ONNX's Gather/GatherElements/GatherND and DirectML's
GATHER / GATHER_ELEMENTS / GATHER_ND define the same output: every element is a bit copy of one input
element, chosen the same way. Negative indices (ONNX wraps them, DirectML's rules may not) and
out-of-range ones are where the two can differ. So once the DirectML kernel has reproduced onnxruntime's
output bit for bit on a session's first runs (:data:`dmlshim.execute.plan.steps.PROVE_RUNS`), later runs
of the check only prove that the indices are in range, and take onnxruntime's output instead of
computing the gather again: on a DeBERTa-v3-small (12 GatherElements of 1.5 MB along the last axis,
computed by the kernels from inputs onnxruntime produced long before, so read from memory rather than
cache) the steady run went from 1.13-1.17x onnxruntime's to 1.00-1.01x. Small gathers take the same
path (a kernel call in Python costs tens of microseconds against onnxruntime's few for such a node).
Any other case (a negative index, an OrtValue, another dtype or shape
than the node's, a node the translation sends to the CPU) computes and compares as before.

A gather (GatherND too) whose indices cannot be negative by construction (:mod:`dmlshim.model.nonnegative`:
a DeBERTa-style ``Clip(min=0)`` then ``Expand``, ArgMax, TopK, a boolean mask's NonZero, ...) needs no proof
from its values at all: onnxruntime's CPU Gather, GatherElements and GatherND refuse any index outside
``[-dim, dim)``, so on any run onnxruntime completes, its output is the DirectML one. The check then
fetches only the shapes of such a gather's computed inputs (a ``Shape`` node each, added to the check's
model), enough to describe the DirectML operator the run used, instead of its inputs and output
(:func:`lean_gathers`). That removes the first runs' proof too: on DeBERTa-v3-small it was 84 MB fetched
and 12 kernels run on the first run. A non-negative constant index qualifies too, proved in range against
each run's data shape (onnxruntime may have folded its gather into a Slice). Not fetching matters most
between quantization nodes: a fetched DequantizeLinear output stops onnxruntime's QDQ fusions, whose
float results differ from the unfused nodes', so such a gather is lean whatever its size.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper

from ...dml.enums import FeatureLevel
from ...model.data_prop import infer_with_data_prop
from ...model.graph_columns import declared_types
from ...model.nonnegative import nonnegative_prover
from ...translate import TensorInfo
from ...translate.plan import elem_type_of
from .index_ranges import axis_of as _axis
from .index_ranges import in_range, lean_indices_in_range

logger = logging.getLogger(__name__)

GIVEN_OPS = frozenset(("Gather", "GatherElements", "GatherND"))
"""Gathers whose output the whole-model check takes from onnxruntime after the first proved runs, when
every index is in range on the run (whatever the output's size)."""

LEAN_OPS = GIVEN_OPS
"""Gathers the check may take by their inputs' shapes alone (onnxruntime's CPU kernels of all three refuse
an index outside ``[-dim, dim)``)."""

NOTE_GATHER_GIVEN = "output_from_onnxruntime"

LEAN_MESSAGE = (
    "this gather's output is onnxruntime's: its indices cannot be negative (proved from the graph, or for "
    "constant, fed or fetched indices from their values on this run), and "
    "onnxruntime refuses any index outside [-dim, dim), so ONNX and DirectML select the same elements; "
    "only the shapes of its inputs were fetched (DMLSHIM_FULL_CHECK=1 computes and compares it on every run)"
)

SHAPE_SUFFIX = "__dmlshim_shape"
"""Suffix of the check's extra outputs that are the shape of a value (a ``Shape`` node added for it)."""

LEAN_MIN_BYTES = 512 * 1024
"""A gather whose output is known statically to be smaller than this is fetched and computed and
compared on its first proved runs (exercising the kernel), then given by its indices' values like a
large one (:func:`output_is_given`), rather than taken by shapes from the first run."""


def given_message(prove_runs: int) -> str:
    """The record note's text for a gather whose output was taken as onnxruntime computed it."""
    return (
        "this gather's output is onnxruntime's: the DirectML kernel reproduced it bit for bit on the "
        f"session's first {prove_runs} runs, and on this run every index was proved in range, where ONNX "
        "and DirectML define the same elements (DMLSHIM_FULL_CHECK=1 computes and compares it on every run)"
    )


@dataclass(frozen=True)
class GivenShape:
    """What :func:`output_is_given` asks of onnxruntime's output and the indices, worked out from the
    inputs' shapes and dtypes alone (the same for every run with those): the output's shape and dtype,
    and the range proof of the indices' values."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    indices_in_range: Callable[[np.ndarray], bool]


def given_shape(op_type: str, attrs: Mapping[str, Any], arrays: Sequence[Any]) -> GivenShape | None:
    """The shape and dtype onnxruntime's output must have to stand for the DirectML gather's output of
    ``arrays`` (numpy arrays with integer indices), and the proof its indices need, or None when no output
    can (see :func:`output_is_given`)."""
    if op_type not in GIVEN_OPS or len(arrays) < 2:
        return None
    data, indices = arrays[0], arrays[1]
    ndarray = np.ndarray
    if not (isinstance(data, ndarray) and isinstance(indices, ndarray)):
        return None
    if indices.dtype.kind not in "iu" or data.ndim == 0:
        return None
    if op_type == "GatherND":
        batch = int(attrs.get("batch_dims", 0))
        k = indices.shape[-1] if indices.ndim else -1
        if k < 0 or batch < 0 or batch + k > data.ndim:
            return None
        proof = functools.partial(lean_indices_in_range, op_type, attrs, data.shape)
        return GivenShape(indices.shape[:-1] + data.shape[batch + k :], data.dtype, proof)
    axis = _axis(attrs, data.ndim)
    if axis is None:
        return None
    if op_type == "GatherElements":
        if indices.ndim != data.ndim:
            return None
        shape = indices.shape
    else:
        shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
    return GivenShape(shape, data.dtype, functools.partial(in_range, dim=int(data.shape[axis])))


def constant_indices_given(
    expected: GivenShape,
    op_type: str,
    attrs: Mapping[str, Any],
    arrays: Sequence[Any],
    constant: np.ndarray | None,
    feature_level: int,
) -> GivenShape | None:
    """``expected`` with a proof that holds for the model's constant indices when some are negative, or
    None. A Gather's or GatherElements' constant signed indices all in ``[-dim, dim)``, at a feature
    level where DirectML wraps negative signed indices as ONNX does (3_0 and later), select the same
    elements in both; the kernel reproduced onnxruntime's output bit for bit with these very indices on
    the proved runs, and later runs differ from those only in the data's values (the shapes are the
    proved ones). The proof is then that the indices are that constant (the engine's own read-only
    array, never a feed overriding it)."""
    if constant is None or len(arrays) < 2 or arrays[1] is not constant:
        return None
    if (
        op_type not in ("Gather", "GatherElements")
        or feature_level < FeatureLevel.FL_3_0
        or constant.dtype.kind != "i"
        or constant.flags.writeable
    ):
        return None
    axis = _axis(attrs, arrays[0].ndim)
    if axis is None:
        return None
    dim = int(arrays[0].shape[axis])
    if constant.size and not (int(constant.min()) >= -dim and int(constant.max()) < dim):
        return None
    return dataclasses.replace(expected, indices_in_range=functools.partial(_is_constant, constant))


def _is_constant(constant: np.ndarray, indices: np.ndarray) -> bool:
    return indices is constant


def output_is_given(op_type: str, attrs: Mapping[str, Any], arrays: Sequence[Any], theirs: Any) -> bool:
    """Whether ``theirs`` can stand for the DirectML gather's output of ``arrays``: numpy arrays of the
    shape and dtype the node produces, and indices that are integers all in range (see the module
    docstring). False means: compute and compare."""
    if not isinstance(theirs, np.ndarray):
        return False
    given = given_shape(op_type, attrs, arrays)
    return (
        given is not None
        and theirs.dtype == given.dtype
        and theirs.shape == given.shape
        and given.indices_in_range(arrays[1])
    )


def shape_output(name: str) -> str:
    """The check's extra output holding the shape of value ``name``."""
    return name + SHAPE_SUFFIX


def shape_source(output: str) -> str | None:
    """The value whose shape the extra output ``output`` holds, or None for any other output."""
    return output[: -len(SHAPE_SUFFIX)] if output.endswith(SHAPE_SUFFIX) else None


def shape_outputs_clash(graph: onnx.GraphProto) -> bool:
    """Whether a top-level value of ``graph`` is named like a shape output (:func:`shape_output`): such
    outputs would then name the model's own values, so none is made (the check takes no gather by its
    inputs' shapes; inspect fetches the values themselves)."""
    columns = declared_types(graph)
    outputs = columns[0] if columns is not None else [o for node in graph.node for o in node.output]
    names = chain(outputs, (v.name for v in graph.input), (t.name for t in graph.initializer))
    return any(name.endswith(SHAPE_SUFFIX) for name in names)


def add_extra_outputs(graph: onnx.GraphProto, extra_outputs: Iterable[str]) -> None:
    """Append ``extra_outputs`` (the whole-model check's) to ``graph``'s outputs, with a ``Shape`` node
    making each shape output among them (none where the model names its own values so)."""
    extra_outputs = list(extra_outputs)
    shapes: bool | None = None
    for out in extra_outputs:
        source = shape_source(out)
        if source is not None:
            if shapes is None:
                shapes = not shape_outputs_clash(graph)
            if shapes:
                graph.node.append(helper.make_node("Shape", [source], [out], name=out))
        graph.output.add().name = out


def _static_bytes(info: TensorInfo | None) -> int | None:
    if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
        return None
    itemsize = helper.tensor_dtype_to_np_dtype(info.elem_type).itemsize if info.elem_type else 4
    return int(np.prod(info.shape, dtype=np.int64)) * itemsize  # type: ignore[arg-type]


def lean_gathers(
    emulated: Sequence[Any],
    infos: Mapping[str, TensorInfo],
    graph: onnx.GraphProto,
    constants: Mapping[str, onnx.TensorProto],
) -> dict[str, tuple[np.dtype[Any], np.dtype[Any]]]:
    """The emulated gathers whose output the whole-model check takes from onnxruntime fetching only their
    inputs' shapes (see the module docstring), by output name, with their data and indices dtypes.

    ``emulated``: the emulated nodes' I/O (``op_type``, ``inputs``, ``output``); ``infos``: static types and
    shapes by value name; ``constants``: ``graph``'s initializers and Constant outputs by name. A gather
    qualifies when its indices are proved non-negative (:func:`dmlshim.model.nonnegative.nonnegative_prover`,
    made on the first candidate), both inputs' element
    types are known, and its output is not known to be smaller than :data:`LEAN_MIN_BYTES` or it sits
    between quantization nodes (its data a DequantizeLinear's output, or its output a QuantizeLinear's
    input: fetching either stops onnxruntime's QDQ fusions, whose results differ from the unfused nodes').
    Indices that are a constant qualify when non-negative; since onnxruntime may fold such a gather into a
    Split or Slice, which would not refuse an index past the axis, the check then proves them in range on
    every run (:func:`lean_indices_in_range`). Between quantization nodes any indices qualify: the check
    holds their values (fed, or fetched: integer indices sit in no QDQ group) and proves them in range on
    every run the same way (a negative one hands the run to the partitioned steps)."""
    found: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}
    if not any(io.op_type in LEAN_OPS for io in emulated) or shape_outputs_clash(graph):
        return found
    proved_nonnegative: Callable[[str], bool] | None = None
    quantized = _next_to_quantization(graph)
    for io in emulated:
        if io.op_type not in LEAN_OPS or len(io.inputs) < 2 or not all(io.inputs[:2]):
            continue
        data, indices = (infos.get(n) for n in io.inputs[:2])
        if data is None or indices is None or not data.elem_type or not indices.elem_type:
            continue
        between_qdq = io.inputs[0] in quantized or io.output in quantized
        size = _static_bytes(infos.get(io.output))
        if size is not None and size < LEAN_MIN_BYTES and not between_qdq:
            continue
        if proved_nonnegative is None:
            elem_types = {name: info.elem_type for name, info in infos.items()}
            proved_nonnegative = nonnegative_prover(graph, constants, elem_types)
        if not between_qdq and not proved_nonnegative(io.inputs[1]):
            continue
        dtypes = tuple(numpy_dtype(info.elem_type) for info in (data, indices))
        if dtypes[0] is not None and dtypes[1] is not None:
            found[io.output] = (dtypes[0], dtypes[1])
    return found


INFERRED_KEPT = 64
"""Distinct input shapes whose inferred shapes :class:`FeedShapes` keeps (then it starts over)."""


def input_symbols(graph: onnx.GraphProto) -> dict[str, tuple[str, int]]:
    """Each symbolic dimension name ``graph``'s inputs declare, with the first input and axis declaring it."""
    symbols: dict[str, tuple[str, int]] = {}
    for value in graph.input:
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.dim_param and not d.HasField("dim_value"):
                symbols.setdefault(d.dim_param, (value.name, axis))
    return symbols


def shared_symbols(graph: onnx.GraphProto) -> dict[str, tuple[tuple[str, int], ...]]:
    """Each symbolic dimension name two or more of ``graph``'s inputs declare, with every input and axis
    declaring it: onnxruntime does not hold the feeds to one size for it (``x: ['N', 4]`` fed 100 rows and
    ``z: ['N']`` fed 5 run), so the first declaring input's size stands for the others' only when the
    feeds agree."""
    declaring: dict[str, list[tuple[str, int]]] = {}
    for value in graph.input:
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.dim_param and not d.HasField("dim_value"):
                declaring.setdefault(d.dim_param, []).append((value.name, axis))
    return {name: tuple(where) for name, where in declaring.items() if len(where) > 1}


def feeds_agree(where: Sequence[tuple[str, int]], values: Mapping[str, Any]) -> bool:
    """Whether every value of ``values`` that an input of ``where`` names (a feed, or an initializer
    listed as an input) has one size at its axis there (one without a shape or that axis: no)."""
    size: int | None = None
    for feed, axis in where:
        if feed not in values:
            continue
        dims = value_shape(values[feed])
        if dims is None or axis >= len(dims):
            return False
        if size is None:
            size = int(dims[axis])
        elif int(dims[axis]) != size:
            return False
    return True


@dataclass(frozen=True)
class FeedShapes:
    """Shapes of lean gathers' inputs that follow from the feeds' shapes alone: each dim a size, or a
    symbolic name some graph input declares (static shape inference carried it there); else, when
    ``skeleton`` is given, onnx's shape inference of the model at the run's input shapes (once per
    distinct input shapes).

    Attributes:
        dims: the static dims by value name (a dim may be None or a name no input declares).
        symbols: for each symbolic name, the graph input and axis that declare it.
        skeleton: the model without its large initializers (declared as inputs instead), or None.
        indices: the computed indices of those gathers, which the check fetches (their values prove
            them in range on each run; no QDQ group holds integer indices).
        shared: every input and axis declaring each symbol that several inputs declare
            (:func:`shared_symbols`): a run whose feeds disagree on one has no size for it from the feeds
            (onnx's inference at the run's shapes, where ``skeleton`` is given, or none: a proof resting
            on another input's size would prove indices in range of a dimension the value lacks).
    """

    dims: Mapping[str, tuple[int | str | None, ...]]
    symbols: Mapping[str, tuple[str, int]]
    skeleton: onnx.ModelProto | None = None
    indices: frozenset[str] = frozenset()
    shared: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    _inferred: dict[tuple[Any, ...], dict[str, tuple[int, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def resolve(self, name: str, values: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The run's shape of ``name`` from the fed values' shapes (None when it does not follow)."""
        shape: list[int] = []
        for d in self.dims[name]:
            if isinstance(d, int):
                shape.append(d)
                continue
            feed, axis = self.symbols.get(d, ("", 0)) if d is not None else ("", 0)
            dims = value_shape(values.get(feed)) if feed else None
            if dims is None or axis >= len(dims):
                return self._infer(values).get(name)
            if d in self.shared and not feeds_agree(self.shared[d], values):
                return self._infer(values).get(name)
            shape.append(int(dims[axis]))
        return tuple(shape)

    def _infer(self, values: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        if self.skeleton is None:
            return {}
        inputs = self.skeleton.graph.input
        fed = [(v.name, value_shape(values.get(v.name))) for v in inputs if v.name in values]
        key = tuple(fed)
        if key not in self._inferred:
            if len(self._inferred) >= INFERRED_KEPT:
                self._inferred.clear()
            self._inferred[key] = _inferred_shapes(self.skeleton, dict(fed), set(self.dims))
        return self._inferred[key]


def value_shape(value: Any) -> tuple[int, ...] | None:
    """An array's or OrtValue's shape (None for anything without one)."""
    if type(value) is np.ndarray:
        return value.shape  # already a tuple of ints (asked on every run of the whole-model check)
    dims = getattr(value, "shape", None)
    dims = dims() if callable(dims) else dims  # an OrtValue's shape is a method
    return None if dims is None else tuple(int(d) for d in dims)


def _inferred_shapes(
    skeleton: onnx.ModelProto, fed: Mapping[str, tuple[int, ...] | None], names: set[str]
) -> dict[str, tuple[int, ...]]:
    """The static shapes onnx infers for ``names`` with the graph inputs at the ``fed`` shapes."""
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    for value in model.graph.input:
        shape = fed.get(value.name)
        if shape is not None:
            del value.type.tensor_type.shape.dim[:]
            for d in shape:
                value.type.tensor_type.shape.dim.add().dim_value = d
    try:
        inferred = infer_with_data_prop(model)
    except Exception as exc:  # an op onnx cannot infer: the run goes to the partitioned steps
        logger.debug("whole-model check: no shapes inferred at %s (%s)", dict(fed), exc)
        return {}
    found: dict[str, tuple[int, ...]] = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        known = value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims)
        if value.name in names and known:
            found[value.name] = tuple(int(d.dim_value) for d in dims)
    return found


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for shape inference: nodes and inputs, small integer initializers (shape constants), the
    other initializers declared as inputs of their type and shape."""
    graph = model.graph
    inputs = list(graph.input)
    declared = {v.name for v in inputs}
    small = []
    for t in graph.initializer:
        if t.name in declared:
            continue
        count = int(np.prod(t.dims, dtype=np.int64))
        if (
            t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
            and count <= 64
            and (t.data_location != onnx.TensorProto.EXTERNAL)
        ):
            small.append(t)
        else:
            inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    skeleton_graph = helper.make_graph(list(graph.node), graph.name, inputs, list(graph.output), small)
    skeleton = helper.make_model(skeleton_graph, opset_imports=list(model.opset_import))
    skeleton.ir_version = model.ir_version
    skeleton.functions.extend(model.functions)
    return skeleton


def feed_shapes(
    emulated: Sequence[Any],
    lean: Iterable[str],
    infos: Mapping[str, TensorInfo],
    model: onnx.ModelProto,
    constants: Mapping[str, onnx.TensorProto] | None = None,
) -> FeedShapes:
    """The inputs of the lean gathers between quantization nodes, whose shapes the check takes from the
    feeds' (:class:`FeedShapes`) instead of a ``Shape`` node, because any added reader of a value inside
    a QDQ group (the ``DequantizeLinear`` output a gather reads, or anything up to the node before it)
    stops onnxruntime's fusion of that group, whose float results differ from the unfused nodes' (a
    Conv -> AveragePool -> Gather of rows -> MaxPool quantized with ``quantize_static``: 0.1 apart at
    the default level)."""
    lean = set(lean)
    if not lean:
        return FeedShapes({}, {})
    graph = model.graph
    symbols = input_symbols(graph)
    shared = shared_symbols(graph)
    quantized = _next_to_quantization(graph)
    dims: dict[str, tuple[int | str | None, ...]] = {}
    static = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    indices: set[str] = set()
    proved: Callable[[str], bool] | None = None
    for io in emulated:
        if io.output not in lean or (io.inputs[0] not in quantized and io.output not in quantized):
            continue
        computed = io.inputs[1] not in static and not _is_constant_node_output(graph, io.inputs[1])
        if computed:
            if proved is None:
                elem_types = {name: info.elem_type for name, info in infos.items()}
                proved = nonnegative_prover(graph, constants or {}, elem_types)
            if not proved(io.inputs[1]):
                indices.add(io.inputs[1])
        for name in io.inputs[:2]:
            # Indices the graph proves non-negative keep their Shape node (no QDQ group holds integer
            # indices), and are not fetched: onnxruntime 1.24 cannot return a value it folded to a
            # constant (a position Range), and fails to build the check.
            if name in indices or (name == io.inputs[1] and computed):
                continue
            info = infos.get(name)
            if info is not None and info.shape is not None:
                dims[name] = tuple(info.shape)
    # a symbol several inputs declare: onnx's inference answers a run whose feeds disagree on it
    known = {d for d in symbols if d not in shared}
    inferable = all(isinstance(d, int) or d in known for shape in dims.values() for d in shape)
    skeleton = None if inferable else _skeleton(model)
    return FeedShapes(dims, symbols, skeleton, frozenset(indices), shared)


def _is_constant_node_output(graph: onnx.GraphProto, name: str) -> bool:
    return any(node.op_type == "Constant" and name in node.output for node in graph.node)


def _next_to_quantization(graph: onnx.GraphProto) -> frozenset[str]:
    """The values a DequantizeLinear produces or a QuantizeLinear reads (their QDQ groups are what
    onnxruntime's fusions rewrite)."""
    names: set[str] = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx", "com.microsoft"):
            if node.op_type == "DequantizeLinear" and node.output:
                names.add(node.output[0])
            elif node.op_type == "QuantizeLinear" and node.input:
                names.add(node.input[0])
    return frozenset(names)


def numpy_dtype(elem_type: int) -> np.dtype[Any] | None:
    """The numpy dtype of an ONNX element type the kernels take, when it maps back to that type."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None
    return dtype if dtype.kind in "biuf" and elem_type_of(dtype) == elem_type else None
