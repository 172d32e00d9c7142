"""The models of tests/test_hostile55.py's peak-memory cases, importable by the child process
:mod:`tests.computed_sizes_child` runs (``model(case)`` and ``feeds(case, n)``, ``n`` the size feed)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

V = helper.make_tensor_value_info


def model(case: str) -> bytes:
    """``tile``/``expand``: a 1000x1000 float table gathered by indices a Tile by fed repeats (an Expand
    to ``Shape(x) * 100``) makes; ``pad``/``resize``: a 1x1 value padded (resized) by fed ``n`` both
    ways, then a row of it gathered."""
    inits = [numpy_helper.from_array(np.array([100], np.int64), "k")]
    if case in ("tile", "expand"):
        if case == "tile":
            nodes = [helper.make_node("Tile", ["i", "n"], ["idx"], name="tile")]
            inputs = [V("i", TensorProto.INT64, [1]), V("n", TensorProto.INT64, [1])]
        else:
            nodes = [
                helper.make_node("Shape", ["n"], ["s"]),
                helper.make_node("Mul", ["s", "k"], ["s2"]),
                helper.make_node("Expand", ["i", "s2"], ["idx"], name="expand"),
            ]
            inputs = [V("i", TensorProto.INT64, [1]), V("n", TensorProto.FLOAT, [None])]
        inits.append(numpy_helper.from_array(np.ones((1000, 1000), np.float32), "table"))
        nodes.append(helper.make_node("Gather", ["table", "idx"], ["g"], axis=0, name="gather"))
    else:
        if case == "pad":
            nodes = [
                helper.make_node("Concat", ["zeros", "n", "n"], ["pads"], axis=0),
                helper.make_node("Pad", ["x", "pads"], ["big"], name="grow"),
            ]
            inits.append(numpy_helper.from_array(np.zeros(2, np.int64), "zeros"))
        else:
            nodes = [
                helper.make_node("Concat", ["n", "n"], ["sizes"], axis=0),
                helper.make_node("Resize", ["x", "", "", "sizes"], ["big"], name="grow"),
            ]
        inputs = [V("x", TensorProto.FLOAT, [1, 1]), V("n", TensorProto.INT64, [1])]
        nodes.append(helper.make_node("Gather", ["big", "i"], ["g"], axis=0, name="gather"))
        inputs.append(V("i", TensorProto.INT64, [1]))
    nodes.append(helper.make_node("ReduceSum", ["g"], ["y"], keepdims=0))
    graph = helper.make_graph(nodes, case, inputs, [V("y", TensorProto.FLOAT, None)], inits)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    made.ir_version = 10
    return made.SerializeToString()


def feeds(case: str, n: int) -> dict[str, np.ndarray]:
    """The feeds making the sized value ``n`` (times 100 for ``expand``) long on each sized axis."""
    if case == "tile":
        return {"i": np.array([3], np.int64), "n": np.array([n], np.int64)}
    if case == "expand":
        return {"i": np.array([3], np.int64), "n": np.zeros(n // 100, np.float32)}
    return {"x": np.ones((1, 1), np.float32), "n": np.array([n], np.int64), "i": np.array([0], np.int64)}
