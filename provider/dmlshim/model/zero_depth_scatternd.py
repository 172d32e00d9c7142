"""ScatterND with empty index tuples, never handed to an onnxruntime that crashes on it.

A ScatterND whose indices' last dimension is 0 is valid ONNX: each of the ``prod(indices.shape[:-1])``
index tuples names the whole data tensor, so the updates replace it one after the other in row-major
order (the last wins), or are combined into it by the ``reduction``. onnxruntime's CPU kernel kills the
process with SIGFPE on it (an integer division by that 0) in the releases before 1.32 that dmlshim
supports: measured on 1.24.4, at run time, and at session creation when constant folding computes the
node; onnxruntime 1.32 computes ONNX's answer.

On such an onnxruntime every model dmlshim hands it (CPU segments, the whole-model and lean checks,
validate's reference, the custom-op engine's session, inspect's runs, the acceptance check) goes through
:func:`guarded_model_source` first: each such node is replaced by ONNX operators that compute ONNX's
answer: the data and the ``n`` updates as the rows of one matrix, its last row with no reduction (the last
update wins; the data itself when ``n = 0``), else the rows reduced by ``ReduceSum``/``ReduceProd``/
``ReduceMax``/``ReduceMin``, reshaped to the data's shape. Where the indices' last dimension is 0 only at
run time (a dynamic shape), the partitioned engine's run-time fallback computes the node in numpy
(:func:`scatter_nd_empty_tuples`) instead of onnxruntime.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import NotSupportedError

logger = logging.getLogger(__name__)

FIXED_IN = (1, 32)
"""The first onnxruntime release known to run the node (1.22 and 1.24 crash; 1.25 to 1.31 unmeasured)."""

_FIELD = b'"\tScatterND'
"""How a NodeProto serializes ``op_type = "ScatterND"`` (field 4, length 9): a cheap first look."""


def _version(text: str) -> tuple[int, int]:
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in text.split(".")[:2]]
    return (parts[0], parts[1]) if len(parts) == 2 else (0, 0)


def ort_version() -> str:
    """The installed onnxruntime's version."""
    import onnxruntime

    return str(onnxruntime.__version__)


def ort_crashes(version: str | None = None) -> bool:
    """Whether onnxruntime ``version`` (the installed one by default) crashes on the node."""
    return _version(ort_version() if version is None else version) < FIXED_IN


CRASH_MARK = "with SIGFPE, so dmlshim computes it itself"
"""The words of :data:`CRASH_NOTE` a report looks for."""

ORT_CRASHES_CODE = "ORT_CRASHES_ON_EMPTY_TUPLES"
"""The note's code in records, inspect and validate."""


CRASH_NOTE = (
    "a ScatterND whose index tuples are empty (indices' last dimension 0) kills onnxruntime {version} "
    "with SIGFPE, so dmlshim computes it itself with ONNX semantics (each update replaces, or is reduced "
    "into, the whole data tensor, in row-major order)"
)


def _shapes(model: onnx.ModelProto) -> tuple[dict[str, list[int | None]], dict[str, int]]:
    """Static shapes and element types of ``model``'s values (onnx's shape inference on the model without
    its weights)."""
    from .weightless import without_weights

    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model))
    except Exception as exc:
        logger.debug("shape inference failed while looking for empty ScatterND tuples: %s", exc)
        inferred = model
    graph = inferred.graph
    shapes: dict[str, list[int | None]] = {t.name: [int(d) for d in t.dims] for t in model.graph.initializer}
    types: dict[str, int] = {t.name: int(t.data_type) for t in model.graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        t = value.type.tensor_type
        if t.elem_type:
            types.setdefault(value.name, int(t.elem_type))
        if t.HasField("shape"):
            shapes.setdefault(
                value.name, [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            )
    return shapes, types


def empty_tuple_nodes(model: onnx.ModelProto) -> dict[int, int]:
    """Positions of the main graph's ScatterND nodes whose indices' last dimension is 0 (with their
    indices' rank) or may be 0 at run time (with minus their indices' rank), and whose data may have rank
    1 or more (onnxruntime refuses rank 0 before it divides)."""
    return _empty_tuple_nodes(model)[0]


def _empty_tuple_nodes(model: onnx.ModelProto) -> tuple[dict[int, int], dict[str, int]]:
    candidates = [
        k for k, n in enumerate(model.graph.node) if n.op_type == "ScatterND" and n.domain in ("", "ai.onnx")
    ]
    if not candidates:
        return {}, {}
    shapes, types = _shapes(model)
    found: dict[int, int] = {}
    for k in candidates:
        node = model.graph.node[k]
        indices = shapes.get(node.input[1]) if len(node.input) > 1 else None
        data = shapes.get(node.input[0])
        updates = shapes.get(node.input[2]) if len(node.input) > 2 else None
        if not indices or (data is not None and len(data) == 0):
            continue
        depth = indices[-1]
        if depth is None and data is not None and updates is not None:
            # ONNX: rank(updates) = rank(indices) - 1 + rank(data) - depth, so the ranks tell the depth
            depth = len(indices) - 1 + len(data) - len(updates)
        if depth == 0:
            found[k] = len(indices)
        elif depth is None:
            found[k] = -len(indices)  # 0 or not only at run time: guarded by an If
    return found, types


def _opset(model: onnx.ModelProto) -> int:
    return max((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)


def refused_type(elem_type: int | None, reduction: str) -> bool:
    """Whether onnxruntime's ScatterND kernel refuses ``reduction`` on data of ``elem_type`` (float16 and
    bfloat16 with any reduction, bool with max and min; measured on 1.24 and 1.32 at a nonzero depth)."""
    if reduction == "none" or elem_type is None:
        return False
    narrow = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    return elem_type in narrow or (elem_type == onnx.TensorProto.BOOL and reduction in ("max", "min"))


def _fold_body(node: onnx.NodeProto, updates: str, v: str) -> onnx.GraphProto:
    """A Loop body folding update row ``i`` (of the outer ``updates`` rows, ``[tuples, size]``) into the
    accumulated row (``[1, size]``) with ``node`` itself at a depth of 1 (one index tuple ``[0]``): each
    element is combined by onnxruntime's own kernel, as it combines them at depth 0 (``ReduceMax`` keeps a
    NaN the kernel drops, ``Where`` writes -0 as 0, ``ReduceSum`` may add in another order)."""
    i, cond, acc = v + "i", v + "cond", v + "acc"
    step = onnx.NodeProto()
    step.CopyFrom(node)
    step.name = ""
    step.input[:] = [acc, v + "one_tuple", v + "row"]
    step.output[:] = [v + "acc_next"]
    nodes = [
        helper.make_node("Identity", [cond], [v + "cond_next"]),
        helper.make_node("Reshape", [i, v + "one"], [v + "i1"]),
        helper.make_node("Gather", [updates, v + "i1"], [v + "row"], axis=0),  # [1, size]
        step,
    ]
    return helper.make_graph(
        nodes,
        "fold",
        [
            helper.make_tensor_value_info(i, onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, []),
            helper.make_value_info(acc, onnx.TypeProto()),
        ],
        [
            helper.make_tensor_value_info(v + "cond_next", onnx.TensorProto.BOOL, []),
            helper.make_value_info(v + "acc_next", onnx.TypeProto()),
        ],
        [
            numpy_helper.from_array(np.zeros((1, 1), np.int64), v + "one_tuple"),
            numpy_helper.from_array(np.array([1], np.int64), v + "one"),
        ],
    )


def _replacement(
    node: onnx.NodeProto, prefix: str, opset: int, indices_rank: int, elem_type: int | None = None
) -> Iterator[onnx.NodeProto | onnx.TensorProto]:
    """The nodes (and constant tensors) computing ``node`` with ONNX semantics: the data and each update
    as rows (``Flatten`` keeps empty dimensions, where ``Reshape`` would read a 0 as "copy"), the last row
    (no reduction) or the rows folded one after the other into the data as onnxruntime's kernel combines
    them (a ``Loop``: ``ReduceSum`` may add in another order, ``ReduceMax`` keeps NaN), in the data's
    shape. A reduction onnxruntime's kernel refuses for the type is left to the kernel at a depth of 1,
    where it gives its own error without dividing by 0."""
    data, updates = node.input[0], node.input[2]
    reduction = next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")
    v = f"{prefix}/"
    if refused_type(elem_type, reduction):
        yield numpy_helper.from_array(np.zeros((1, 1), np.int64), v + "one_tuple")
        yield numpy_helper.from_array(np.array([0], np.int64), v + "zero")
        yield numpy_helper.from_array(np.array([1], np.int64), v + "one")
        yield helper.make_node("Slice", [data, v + "zero", v + "one", v + "zero"], [v + "first"])
        refused = onnx.NodeProto()
        refused.CopyFrom(node)
        refused.input[:] = [data, v + "one_tuple", v + "first"]
        yield refused
        return
    yield helper.make_node("Flatten", [data], [v + "d"], axis=0)  # [1, size]
    yield helper.make_node("Flatten", [updates], [v + "u"], axis=indices_rank - 1)  # [tuples, size]
    if reduction == "none":
        yield helper.make_node("Concat", [v + "d", v + "u"], [v + "rows"], axis=0)
        yield numpy_helper.from_array(np.array(-1, np.int64), v + "last")
        yield helper.make_node("Gather", [v + "rows", v + "last"], [v + "flat"], axis=0)
    else:
        yield numpy_helper.from_array(np.array(0, np.int64), v + "first_axis")
        yield helper.make_node("Shape", [v + "u"], [v + "ushape"])
        yield helper.make_node("Gather", [v + "ushape", v + "first_axis"], [v + "tuples"], axis=0)
        yield helper.make_node(
            "Loop",  # not Scan: onnxruntime's Scan fails on 0 rows
            [v + "tuples", "", v + "d"],
            [v + "flat"],
            body=_fold_body(node, v + "u", v + "fold/"),
        )
    yield helper.make_node("Shape", [data], [v + "shape"])
    zero = {"allowzero": 1} if opset >= 14 else {}
    yield helper.make_node("Reshape", [v + "flat", v + "shape"], [node.output[0]], name=node.name, **zero)


def _guarded(
    graph: onnx.GraphProto, node: onnx.NodeProto, prefix: str, opset: int, rank: int, elem_type: int | None
) -> None:
    """Append to ``graph`` ``node`` behind an If on its indices' last dimension: 0 takes the ONNX
    operators of :func:`_replacement`, anything else the node itself (onnxruntime runs one branch)."""
    v = f"{prefix}/"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(-1, np.int64), v + "last_axis"),
            numpy_helper.from_array(np.array(0, np.int64), v + "none"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Shape", [node.input[1]], [v + "ishape"]),
            helper.make_node("Gather", [v + "ishape", v + "last_axis"], [v + "depth"], axis=0),
            helper.make_node("Equal", [v + "depth", v + "none"], [v + "empty"]),
        ]
    )
    branch_out = helper.make_value_info(v + "out", onnx.TypeProto())
    inner = onnx.NodeProto()
    inner.CopyFrom(node)
    inner.output[0] = v + "out"
    inner.name = ""
    then_items = list(_replacement(inner, v + "then", opset, rank, elem_type))
    then_graph = helper.make_graph(
        [i for i in then_items if isinstance(i, onnx.NodeProto)],
        "empty_tuples",
        [],
        [branch_out],
        [i for i in then_items if isinstance(i, onnx.TensorProto)],
    )
    else_graph = helper.make_graph([inner], "tuples", [], [branch_out])
    graph.node.append(
        helper.make_node(
            "If",
            [v + "empty"],
            [node.output[0]],
            name=node.name,
            then_branch=then_graph,
            else_branch=else_graph,
        )
    )


def without_empty_tuples(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` with every ScatterND of empty index tuples in its main graph computed by other
    ONNX operators, or None when it has none. ``model`` is not modified."""
    ranks, types = _empty_tuple_nodes(model)
    positions = set(ranks)
    if not positions:
        return None
    from ..graph import value_names

    taken = value_names(model.graph)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    opset = _opset(model)
    for k, node in enumerate(model.graph.node):
        if k not in positions:
            out.graph.node.append(node)
            continue
        prefix, j = f"dmlshim_scatternd_{k}", 0
        while any(n.startswith(prefix + "/") for n in taken):
            j += 1
            prefix = f"dmlshim_scatternd_{k}_{j}"
        if ranks[k] > 0:
            for item in _replacement(node, prefix, opset, ranks[k], types.get(node.input[0])):
                if isinstance(item, onnx.TensorProto):
                    out.graph.initializer.append(item)
                else:
                    out.graph.node.append(item)
        else:
            _guarded(out.graph, node, prefix, opset, -ranks[k], types.get(node.input[0]))
    logger.info(
        "ScatterND with empty index tuples (%s) computed from ONNX operators: onnxruntime < %d.%d crashes",
        ", ".join(model.graph.node[k].name or f"#{k}" for k in sorted(positions)),
        *FIXED_IN,
    )
    return out


def _file_has_field(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return view.find(_FIELD) >= 0
    except OSError:
        return False  # onnxruntime reports what it cannot read


def guarded_model_source(source: Any) -> Any:
    """``source`` (what onnxruntime's ``InferenceSession`` takes: a path, bytes) as is, or, on an
    onnxruntime that crashes on ScatterND with empty index tuples and when it has such a node, the bytes of
    the model with those nodes computed by other ONNX operators.

    Raises:
        NotSupportedError: such a model given by path keeps its weights in external files (its bytes
            alone could not find them); the message names the node and the onnxruntime version.
    """
    if not ort_crashes():
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        if _FIELD not in source:
            return source
        model = onnx.load_from_string(bytes(source))
        rewritten = without_empty_tuples(model)
        return source if rewritten is None else rewritten.SerializeToString()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not _file_has_field(path):
            return source
        model = onnx.load(path, load_external_data=False)
        rewritten = without_empty_tuples(model)
        if rewritten is None:
            return source
        from .weightless import is_external

        if any(is_external(t) for t in model.graph.initializer):
            import onnxruntime

            k = min(empty_tuple_nodes(model))
            raise NotSupportedError(
                f"node {model.graph.node[k].name or '#' + str(k)!r} (ScatterND): its indices' last dimension "
                f"is 0, which kills onnxruntime {onnxruntime.__version__} with SIGFPE; dmlshim computes it "
                "from other ONNX operators, but cannot hand onnxruntime the rewritten model of a file whose "
                "weights are external: load the model as a ModelProto or bytes, or use onnxruntime "
                f"{FIXED_IN[0]}.{FIXED_IN[1]} or newer",
                node=model.graph.node[k].name or None,
                op_type="ScatterND",
                rule="onnxruntime before 1.32 crashes on ScatterND with empty index tuples",
                path=path,
            )
        return rewritten.SerializeToString()
    return source


def scatter_nd_empty_tuples(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none"
) -> np.ndarray:
    """ScatterND with ONNX semantics where ``indices``' last dimension is 0: the ``prod(indices.shape[:-1])``
    updates replace (or are reduced into) the whole data tensor in row-major order.

    Raises:
        BadInputError: the data is a scalar, or the updates' shape is not ``indices.shape[:-1] + data.shape``
            (as onnxruntime refuses them).
    """
    from ..errors import BadInputError

    expected = tuple(indices.shape[:-1]) + tuple(data.shape)
    if data.ndim == 0 or tuple(updates.shape) != expected:
        raise BadInputError(
            f"ScatterND updates must have shape indices.shape[:-1] + data.shape = {list(expected)} (data of "
            f"rank 1 or more), not {list(updates.shape)} for data {list(data.shape)}",
            op_type="ScatterND",
            value=list(updates.shape),
            rule="ONNX ScatterND: updates.shape == indices.shape[:-1] + data.shape[indices.shape[-1]:]",
        )
    elem = helper.np_dtype_to_tensor_dtype(data.dtype) if data.dtype.kind in "biuf" else None
    if elem is None and data.dtype.itemsize == 2 and data.dtype.kind == "V":
        elem = onnx.TensorProto.BFLOAT16  # ml_dtypes' bfloat16
    if refused_type(elem, reduction):
        raise BadInputError(
            f"ScatterND: {data.dtype} data is not supported when reduction is {reduction!r} (onnxruntime's "
            "kernel refuses it)",
            op_type="ScatterND",
            value=reduction,
            rule="onnxruntime's ScatterND reductions: no float16 or bfloat16; max and min not on bool",
        )
    rows = updates.reshape((int(np.prod(indices.shape[:-1])), *data.shape))
    out = np.array(data, copy=True)
    for row in rows:
        if reduction == "none":
            out = np.array(row, copy=True)
        elif reduction == "add":
            out = out + row
        elif reduction == "mul":
            out = out * row
        elif reduction == "max":  # onnxruntime's kernel: NaN is not kept (np.maximum keeps it)
            out = np.where(row < out, out, row)
        elif reduction == "min":
            out = np.where(out < row, out, row)
    return out.astype(data.dtype, copy=False)
