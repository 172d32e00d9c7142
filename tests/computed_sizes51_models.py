"""Models for tests/test_computed_sizes51.py: a shape computed inside the graph from fed values or shapes.

Each sizes a node ``big`` (ConstantOfShape, Expand, Tile, Range) from top-level shape arithmetic on the
feeds, then Gathers two columns of it (the part dmlshim emulates). ``feeds(case, n)`` makes ``big``'s
output ``n x n`` elements: ``n = 20000`` is 1.6 GB of float32 (3.2 GB of int64 for Range), ``n = 400``
fits any limit the tests set.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

I64, F = TensorProto.INT64, TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _c(name: str, values: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def model(case: str, opset: int = 18) -> bytes:
    inputs = [vi("i", I64, [2])]
    inits = []
    if case == "shape_concat":  # x [n] -> Shape -> Concat(const) -> ConstantOfShape
        inputs.append(vi("x", F, [None]))
        inits.append(_c("c", [20000]))
        value = numpy_helper.from_array(np.array([2.5], np.float32))
        nodes = [
            helper.make_node("Shape", ["x"], ["sx"]),
            helper.make_node("Concat", ["sx", "c"], ["s"], axis=0),
            helper.make_node("ConstantOfShape", ["s"], ["e"], name="big", value=value),
        ]
    elif case == "shape_mul":  # x [a, b] -> Shape -> Mul(const) -> Expand(y, .)
        inputs += [vi("x", F, [None, None]), vi("y", F, [1, 1])]
        inits.append(_c("k", [100, 100]))
        nodes = [
            helper.make_node("Shape", ["x"], ["sx"]),
            helper.make_node("Mul", ["sx", "k"], ["s"]),
            helper.make_node("Expand", ["y", "s"], ["e"], name="big"),
        ]
    elif case == "scalar_unsqueeze":  # fed n -> Unsqueeze -> Concat(n, n) -> ConstantOfShape
        inputs.append(vi("n", I64, []))
        inits.append(_c("ax", [0]))
        nodes = [
            helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
            helper.make_node("Concat", ["nu", "nu"], ["s"], axis=0),
            helper.make_node("ConstantOfShape", ["s"], ["e"], name="big"),
        ]
    elif (
        case == "slice_arith"
    ):  # x [a, b, 1] -> Shape -> Slice[:2] -> Cast -> Mul/Div/Sub/Add -> Reshape -> Tile
        inputs += [vi("x", F, [None, None, 1]), vi("y", F, [2, 2])]
        inits += [_c("z", [0]), _c("two", [2]), _c("d", [2]), _c("one", [1]), _c("sh", [2]), _c("k", [200])]
        nodes = [
            helper.make_node("Shape", ["x"], ["sx"]),
            helper.make_node("Slice", ["sx", "z", "two"], ["s2"]),
            helper.make_node("Cast", ["s2"], ["s3"], to=TensorProto.INT32),
            helper.make_node("Cast", ["s3"], ["s4"], to=I64),
            helper.make_node("Mul", ["s4", "k"], ["s4k"]),
            helper.make_node("Div", ["s4k", "d"], ["s5"]),
            helper.make_node("Sub", ["s5", "one"], ["s6"]),
            helper.make_node("Add", ["s6", "one"], ["s7"]),
            helper.make_node("Reshape", ["s7", "sh"], ["s"]),
            helper.make_node("Tile", ["y", "s"], ["e"], name="big"),
        ]
    elif case == "gather_squeeze":  # Shape(x) -> Gather(0) -> Unsqueeze -> Concat -> Squeeze.. -> Range
        inputs.append(vi("x", F, [None, 1]))
        inits += [_c("ax", [0]), _c("zero", 0), _c("one", 1)]
        nodes = [
            helper.make_node("Shape", ["x"], ["sx"]),
            helper.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
            helper.make_node("Squeeze", ["nu", "ax"], ["m"]),
            helper.make_node("Mul", ["m", "m"], ["mm"]),
            helper.make_node("Range", ["zero", "mm", "one"], ["r"], name="big"),
            helper.make_node("Reshape", ["r", "rs"], ["e"]),
        ]
        inits.append(_c("rs", [-1, 2]))
    else:
        raise ValueError(case)
    nodes.append(helper.make_node("Gather", ["e", "i"], ["out"], name="g", axis=1))
    out_type = I64 if case == "gather_squeeze" else F
    graph = helper.make_graph(nodes, "s51", inputs, [vi("out", out_type, None)], inits)
    m = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    return m.SerializeToString()


def feeds(case: str, n: int) -> dict[str, np.ndarray]:
    """Feeds making the big value n x n elements (``n`` even)."""
    i = np.array([1, -1], np.int64)
    if case == "shape_concat":
        return {"i": i, "x": np.zeros(n, np.float32)}  # [n, 20000]
    if case == "shape_mul":
        return {
            "i": i,
            "x": np.zeros((n // 100, n // 100), np.float32),
            "y": np.full((1, 1), 3.5, np.float32),
        }
    if case == "scalar_unsqueeze":
        return {"i": i, "n": np.array(n, np.int64)}
    if case == "slice_arith":
        return {
            "i": i,
            "x": np.zeros((n // 200, n // 200, 1), np.float32),
            "y": np.arange(4, dtype=np.float32).reshape(2, 2),
        }
    if case == "gather_squeeze":
        return {"i": i, "x": np.zeros((n, 1), np.float32)}
    raise ValueError(case)


CASES = ("shape_concat", "shape_mul", "scalar_unsqueeze", "slice_arith", "gather_squeeze")
