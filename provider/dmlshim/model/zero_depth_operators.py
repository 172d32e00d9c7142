"""The ONNX operators that compute a ScatterND with empty index tuples (indices' last dimension 0) as
ONNX defines it, for onnxruntime releases that crash on the node (:mod:`.zero_depth_scatternd` finds the
nodes and hands the rewritten model over): the data and the updates as rows of one matrix, the last row
without a reduction, else the update rows folded into the data row one after the other by the ScatterND
itself at a depth of 1; and the If that chooses them only when the depth is 0 at run time.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper


def refused_type(elem_type: int | None, reduction: str) -> bool:
    """Whether onnxruntime's ScatterND kernel refuses ``reduction`` on data of ``elem_type`` (float16 and
    bfloat16 with any reduction, bool with max and min; measured on 1.24 and 1.32 at a nonzero depth)."""
    if reduction == "none" or elem_type is None:
        return False
    narrow = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    return elem_type in narrow or (elem_type == onnx.TensorProto.BOOL and reduction in ("max", "min"))


def _fold_body(node: onnx.NodeProto, rows: str, v: str) -> onnx.GraphProto:
    """A Loop body folding row ``i + 1`` (of the outer ``rows``, ``[n + 1, size]``: the data, then the
    updates) into the accumulated row (``[1, size]``) with ``node`` itself at a depth of 1 (one index
    tuple ``[0]``): each element is combined by onnxruntime's own kernel, as it combines them at depth 0
    (``ReduceMax`` keeps a NaN the kernel drops, ``Where`` writes -0 as 0, ``ReduceSum`` may add in
    another order)."""
    i, cond, acc = v + "i", v + "cond", v + "acc"
    step = onnx.NodeProto()
    step.CopyFrom(node)
    step.name = ""
    step.input[:] = [acc, v + "one_tuple", v + "row"]
    step.output[:] = [v + "acc_next"]
    nodes = [
        helper.make_node("Identity", [cond], [v + "cond_next"]),
        helper.make_node("Add", [i, v + "next"], [v + "i_next"]),
        helper.make_node("Reshape", [v + "i_next", v + "one"], [v + "i1"]),
        helper.make_node("Gather", [rows, v + "i1"], [v + "row"], axis=0),  # [1, size]
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
            numpy_helper.from_array(np.array(1, np.int64), v + "next"),
        ],
    )


def replacement(
    node: onnx.NodeProto, prefix: str, opset: int, elem_type: int | None = None
) -> Iterator[onnx.NodeProto | onnx.TensorProto]:
    """The nodes (and constant tensors) computing ``node`` with ONNX semantics, whatever the ranks: the
    data and each update as the ``k = n + 1`` rows of one matrix (``n = size(updates) / size(data)``, any
    ``k`` when the data is empty), the last row (no reduction) or the update rows folded into the data row
    one after the other as onnxruntime's kernel combines them (a ``Loop``: ``ReduceSum`` may add in another
    order, ``ReduceMax`` keeps a NaN the kernel drops), in the data's shape. Reshape targets hold no 0
    (which Reshape before opset 14 reads as "copy"): ``[-1]`` and ``[k, -1]`` with ``k >= 1``. A reduction
    onnxruntime's kernel refuses for the type is left to the kernel at a depth of 1, where it gives its own
    error without dividing by 0."""
    data, updates = node.input[0], node.input[2]
    reduction = next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")
    v = f"{prefix}/"
    if refused_type(elem_type, reduction):
        yield numpy_helper.from_array(np.zeros((1, 1), np.int64), v + "one_tuple")
        yield numpy_helper.from_array(np.array([0], np.int64), v + "start")
        yield numpy_helper.from_array(np.array([1], np.int64), v + "stop")
        yield helper.make_node("Slice", [data, v + "start", v + "stop", v + "start"], [v + "first"])
        refused = onnx.NodeProto()
        refused.CopyFrom(node)
        refused.input[:] = [data, v + "one_tuple", v + "first"]
        yield refused
        return
    yield numpy_helper.from_array(np.array([-1], np.int64), v + "flat_shape")
    yield numpy_helper.from_array(np.array(0, np.int64), v + "zero")
    yield numpy_helper.from_array(np.array(1, np.int64), v + "one")
    yield helper.make_node("Reshape", [data, v + "flat_shape"], [v + "d"])
    yield helper.make_node("Reshape", [updates, v + "flat_shape"], [v + "u"])
    yield helper.make_node("Concat", [v + "d", v + "u"], [v + "all"], axis=0)
    # sizes from the flat shapes: onnxruntime 1.24 has no Size kernel for bfloat16 and other narrow types
    yield helper.make_node("Shape", [v + "d"], [v + "dshape"])
    yield helper.make_node("Gather", [v + "dshape", v + "zero"], [v + "size"], axis=0)
    yield helper.make_node("Shape", [v + "u"], [v + "ushape"])
    yield helper.make_node("Gather", [v + "ushape", v + "zero"], [v + "usize"], axis=0)
    yield helper.make_node("Equal", [v + "size", v + "zero"], [v + "no_data"])
    yield helper.make_node("Where", [v + "no_data", v + "one", v + "size"], [v + "divisor"])
    yield helper.make_node("Div", [v + "usize", v + "divisor"], [v + "n"])
    yield helper.make_node("Add", [v + "n", v + "one"], [v + "k"])
    yield helper.make_node("Reshape", [v + "k", v + "flat_shape"], [v + "k1"])
    yield helper.make_node("Concat", [v + "k1", v + "flat_shape"], [v + "rows_shape"], axis=0)
    yield helper.make_node("Reshape", [v + "all", v + "rows_shape"], [v + "rows"])
    if reduction == "none":
        yield numpy_helper.from_array(np.array(-1, np.int64), v + "last")
        yield helper.make_node("Gather", [v + "rows", v + "last"], [v + "flat"], axis=0)
    else:
        yield numpy_helper.from_array(np.array([0], np.int64), v + "first_row")
        yield numpy_helper.from_array(np.array([1], np.int64), v + "rows_from")
        yield helper.make_node(
            "Slice", [v + "rows", v + "first_row", v + "rows_from", v + "first_row"], [v + "d1"]
        )
        yield helper.make_node(
            "Loop",  # not Scan: onnxruntime's Scan fails on 0 rows
            [v + "n", "", v + "d1"],
            # [1, size], reshaped once below: onnxruntime 1.24 fuses two Reshapes and loses allowzero
            [v + "flat"],
            body=_fold_body(node, v + "rows", v + "fold/"),
        )
    yield helper.make_node("Shape", [data], [v + "shape"])
    if opset >= 14:
        yield helper.make_node(
            "Reshape", [v + "flat", v + "shape"], [node.output[0]], name=node.name, allowzero=1
        )
        return
    # Before opset 14 a 0 in the data's shape would read as "copy": empty data is its own answer
    out = helper.make_value_info(v + "out", onnx.TypeProto())
    reshaped = helper.make_node("Reshape", [v + "flat", v + "shape"], [v + "out"])
    yield helper.make_node(
        "If",
        [v + "no_data"],
        [node.output[0]],
        name=node.name,
        then_branch=helper.make_graph(
            [helper.make_node("Identity", [data], [v + "out"])], "no_data", [], [out]
        ),
        else_branch=helper.make_graph([reshaped], "data", [], [out]),
    )


def place(graph: onnx.GraphProto, items: Iterator[onnx.NodeProto | onnx.TensorProto]) -> None:
    for item in items:
        if isinstance(item, onnx.TensorProto):
            graph.initializer.append(item)
        else:
            graph.node.append(item)


def guarded(
    graph: onnx.GraphProto, node: onnx.NodeProto, prefix: str, opset: int, elem_type: int | None
) -> None:
    """Append to ``graph`` ``node`` behind an If on its indices' last dimension: 0 takes the ONNX
    operators of :func:`replacement`, anything else the node itself (onnxruntime runs one branch)."""
    v = f"{prefix}/"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(-1, np.int64), v + "last_axis"),
            numpy_helper.from_array(np.array(0, np.int64), v + "none"),
            numpy_helper.from_array(np.array([1], np.int64), v + "pad"),
        ]
    )
    # [1] + the indices' shape: indices of rank 0 read 1 and take the node itself (onnxruntime's refusal)
    graph.node.extend(
        [
            helper.make_node("Shape", [node.input[1]], [v + "ishape"]),
            helper.make_node("Concat", [v + "pad", v + "ishape"], [v + "padded"], axis=0),
            helper.make_node("Gather", [v + "padded", v + "last_axis"], [v + "depth"], axis=0),
            helper.make_node("Equal", [v + "depth", v + "none"], [v + "empty"]),
        ]
    )
    branch_out = helper.make_value_info(v + "out", onnx.TypeProto())
    inner = onnx.NodeProto()
    inner.CopyFrom(node)
    inner.output[0] = v + "out"
    inner.name = ""
    then_graph = helper.make_graph([], "empty_tuples", [], [branch_out])
    place(then_graph, replacement(inner, v + "then", opset, elem_type))
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
