"""A generated model with many gather/scatter nodes, for timing translation per node."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bench.cases import IR_VERSION, OPSET


def many_nodes_model(count: int, cols: int = 16) -> onnx.ModelProto:
    """``count`` independent gather/scatter nodes, each on its own graph input of a distinct shape.

    Node ``i`` reads ``x{i}`` of shape ``(4 + i, cols)``; distinct shapes make every node a distinct
    translation, so a translation cache cannot hide the per-node cost. The nodes cycle through Gather
    (axis 0 and 1), GatherElements, GatherND, ScatterElements and ScatterND; the constant indices are
    shared and valid for every shape.
    """
    rng = np.random.default_rng(0)
    consts = {
        "rows_idx": np.array([3, 0, 2, 1], dtype=np.int64),
        "cols_perm": rng.permutation(cols).astype(np.int64),
        "elem_idx": rng.integers(0, 4, size=(2, cols), dtype=np.int64),
        "nd_idx": np.array([[2], [0], [3]], dtype=np.int64),
        "scatter_idx": np.stack([rng.permutation(4)[:2] for _ in range(cols)], axis=1).astype(np.int64),
        "scatter_upd": rng.standard_normal((2, cols)).astype(np.float32),
        "scatter_nd_idx": np.array([[1], [3]], dtype=np.int64),
    }
    # (op, extra inputs, attributes, output rows; None = the input's rows)
    steps: list[tuple[str, list[str], dict[str, int], int | None]] = [
        ("Gather", ["rows_idx"], {"axis": 0}, 4),
        ("Gather", ["cols_perm"], {"axis": 1}, None),
        ("GatherElements", ["elem_idx"], {"axis": 0}, 2),
        ("GatherND", ["nd_idx"], {}, 3),
        ("ScatterElements", ["scatter_idx", "scatter_upd"], {"axis": 0}, None),
        ("ScatterND", ["scatter_nd_idx", "scatter_upd"], {}, None),
    ]
    nodes, inputs, outputs = [], [], []
    for i in range(count):
        op, extra, attrs, out_rows = steps[i % len(steps)]
        nodes.append(helper.make_node(op, [f"x{i}", *extra], [f"y{i}"], name=f"n{i}", **attrs))
        inputs.append(helper.make_tensor_value_info(f"x{i}", onnx.TensorProto.FLOAT, [4 + i, cols]))
        outputs.append(
            helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, [out_rows or 4 + i, cols])
        )
    graph = helper.make_graph(
        nodes,
        "many_gather_scatter_nodes",
        inputs,
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
