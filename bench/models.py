"""A generated model with many gather/scatter nodes, for timing translation per node."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bench.cases import IR_VERSION, OPSET


def chain_model(count: int, rows: int = 8, cols: int = 16) -> onnx.ModelProto:
    """A chain of ``count`` shape-preserving gather/scatter nodes on a ``(rows, cols)`` float tensor.

    The chain cycles through Gather (axis 0 and 1), GatherElements, GatherND (1-tuples), ScatterElements
    and ScatterND, with constant indices, so every node has a static shape and translates.
    """
    rng = np.random.default_rng(0)
    consts = {
        "rows_perm": rng.permutation(rows).astype(np.int64),
        "cols_perm": rng.permutation(cols).astype(np.int64),
        "elem_idx": rng.integers(0, rows, size=(rows, cols), dtype=np.int64),
        "nd_idx": rng.permutation(rows).astype(np.int64)[:, None],
        "scatter_idx": np.stack([rng.permutation(rows) for _ in range(cols)], axis=1).astype(np.int64),
        "scatter_upd": rng.standard_normal((rows, cols)).astype(np.float32),
        "scatter_nd_idx": rng.permutation(rows).astype(np.int64)[: rows // 2, None],
        "scatter_nd_upd": rng.standard_normal((rows // 2, cols)).astype(np.float32),
    }
    # (op, extra inputs, attributes): each maps a (rows, cols) tensor to a (rows, cols) tensor.
    steps: list[tuple[str, list[str], dict[str, int]]] = [
        ("Gather", ["rows_perm"], {"axis": 0}),
        ("Gather", ["cols_perm"], {"axis": 1}),
        ("GatherElements", ["elem_idx"], {"axis": 0}),
        ("GatherND", ["nd_idx"], {}),
        ("ScatterElements", ["scatter_idx", "scatter_upd"], {"axis": 0}),
        ("ScatterND", ["scatter_nd_idx", "scatter_nd_upd"], {}),
    ]
    nodes = []
    current = "x"
    for i in range(count):
        op, extra, attrs = steps[i % len(steps)]
        out = f"t{i}"
        nodes.append(helper.make_node(op, [current, *extra], [out], name=f"n{i}", **attrs))
        current = out
    graph = helper.make_graph(
        nodes,
        "gather_scatter_chain",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info(current, onnx.TensorProto.FLOAT, [rows, cols])],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
