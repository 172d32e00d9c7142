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
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import helper

from ...dml.enums import FeatureLevel
from ...model.graph_columns import declared_types
from ...model.nonnegative import nonnegative_prover
from ...translate import TensorInfo
from ...translate.plan import elem_type_of
from .index_ranges import axis_of as _axis
from .index_ranges import in_range, lean_indices_in_range
from .symbol_shapes import FeedShapes, _skeleton, input_symbols, shared_symbols

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


def add_extra_outputs(
    graph: onnx.GraphProto, extra_outputs: Iterable[str], clash: Callable[[], bool] | None = None
) -> None:
    """Append ``extra_outputs`` (the whole-model check's) to ``graph``'s outputs, with a ``Shape`` node
    making each shape output among them (none where the model names its own values so). ``clash``:
    :func:`shape_outputs_clash` of the graph ``graph`` copies (the same top-level names), when the caller
    asked it already (answered once)."""
    extra_outputs = list(extra_outputs)
    shapes: bool | None = None
    for out in extra_outputs:
        source = shape_source(out)
        if source is not None:
            if shapes is None:
                shapes = not (clash() if clash is not None else shape_outputs_clash(graph))
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
    clash: Callable[[], bool] | None = None,
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
    every run the same way (a negative one hands the run to the partitioned steps). ``clash``:
    :func:`shape_outputs_clash` of ``graph``, when the caller asks it too (answered once)."""
    found: dict[str, tuple[np.dtype[Any], np.dtype[Any]]] = {}
    clashes = clash if clash is not None else functools.partial(shape_outputs_clash, graph)
    if not any(io.op_type in LEAN_OPS for io in emulated) or clashes():
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
