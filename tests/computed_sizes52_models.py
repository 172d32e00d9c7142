"""Models for tests/test_computed_sizes52.py: sizes computed from the feeds through the ops round 51 left out.

Each sizes a node ``big`` (ConstantOfShape or Range) from the feeds through ``Where`` and comparisons,
``ReduceProd``, ``Mod``/``Max``/``Min``, ``Abs``/``Neg``, a reduction over a fed tensor of more than 64
elements, or inside the taken branch of an ``If``, then Gathers two columns of it (the part dmlshim
emulates). ``feeds(case, n)`` makes ``big``'s output ``n x n`` elements: ``n = 20000`` is 1.6 GB of
float32 (3.2 GB of int64 for the Range), ``n = 400`` fits any limit the tests set.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

I64, F, B = TensorProto.INT64, TensorProto.FLOAT, TensorProto.BOOL
vi = helper.make_tensor_value_info
node = helper.make_node


def _c(name: str, values: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _square(scalar: str) -> list[onnx.NodeProto]:
    """``[s, s]`` from the scalar ``s``, into ``ConstantOfShape`` ``big`` (output ``e``)."""
    return [
        node("Unsqueeze", [scalar, "ax"], ["su"]),
        node("Concat", ["su", "su"], ["s"], axis=0),
        node("ConstantOfShape", ["s"], ["e"], name="big"),
    ]


def _branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [vi(out, F, None)])


def model(case: str, opset: int = 18) -> bytes:
    inputs = [vi("i", I64, [2])]
    inits = [_c("ax", [0]), _c("zero", 0), _c("one", 1)]
    out_type = F
    if case == "where_compare":  # n -> Where(And(Not(Equal(n, 0)), GreaterOrEqual(n, 1)), n, 1)
        inputs.append(vi("n", I64, []))
        nodes = [
            node("Equal", ["n", "zero"], ["eq"]),
            node("Not", ["eq"], ["ne"]),
            node("GreaterOrEqual", ["n", "one"], ["ge"]),
            node("And", ["ne", "ge"], ["ok"]),
            node("Where", ["ok", "n", "one"], ["m"]),
            *_square("m"),
        ]
    elif case == "reduceprod":  # x [n/100, 100] -> ReduceProd(Shape(x)) -> Concat(., [20000])
        inputs.append(vi("x", F, [None, None]))
        inits.append(_c("c", [20000]))
        nodes = [
            node("Shape", ["x"], ["sx"]),
            node("ReduceProd", ["sx"], ["p"], keepdims=1),
            node("Concat", ["p", "c"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ]
    elif case == "mod_maxmin":  # n -> Min(Max(Mod(n, 10**9), 1), 10**6)
        inputs.append(vi("n", I64, []))
        inits += [_c("g", 10**9), _c("cap", 10**6)]
        nodes = [
            node("Mod", ["n", "g"], ["md"]),
            node("Max", ["md", "one"], ["mx"]),
            node("Min", ["mx", "cap"], ["m"]),
            *_square("m"),
        ]
    elif case == "abs_neg":  # fed -n -> Abs(Neg(.)) -> Mul(a, a) -> Range(0, ., 1)
        inputs.append(vi("n", I64, []))
        inits.append(_c("rs", [-1, 2]))
        nodes = [
            node("Neg", ["n"], ["ng"]),
            node("Abs", ["ng"], ["a"]),
            node("Mul", ["a", "a"], ["aa"]),
            node("Range", ["zero", "aa", "one"], ["r"], name="big"),
            node("Reshape", ["r", "rs"], ["e"]),
        ]
        out_type = I64
    elif case == "reduce_large":  # v int64 [100] fed -> ReduceMax -> Concat(r, r)
        inputs.append(vi("v", I64, [100]))
        nodes = [
            node("ReduceMax", ["v"], ["r"], keepdims=1),
            node("Concat", ["r", "r"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ]
    elif case == "if_branch":  # If(n > 0) then ConstantOfShape([n, n]) else a 2 x 2 zeros
        inputs.append(vi("n", I64, []))
        inits.append(_c("two", [2, 2]))
        then = _branch(
            "then",
            [
                node("Unsqueeze", ["n", "ax"], ["su"]),
                node("Concat", ["su", "su"], ["s"], axis=0),
                node("ConstantOfShape", ["s"], ["et"], name="big"),
            ],
            "et",
        )
        other = _branch("else", [node("ConstantOfShape", ["two"], ["ee"], name="small")], "ee")
        nodes = [
            node("Greater", ["n", "zero"], ["pos"]),
            node("If", ["pos"], ["e"], name="branch", then_branch=then, else_branch=other),
        ]
    elif case == "float_scale":  # x [n/100, n/100] -> Cast(Shape) to float -> Mul, Add -> Floor -> Cast int
        inputs.append(vi("x", F, [None, None]))
        inits += [numpy_helper.from_array(np.array([100.0, 100.0], np.float32), "k")]
        inits += [numpy_helper.from_array(np.array([0.0, 0.75], np.float32), "b")]
        nodes = [
            node("Shape", ["x"], ["sx"]),
            node("Cast", ["sx"], ["sf"], to=F),
            node("Mul", ["sf", "k"], ["sk"]),
            node("Add", ["sk", "b"], ["sb"]),
            node("Floor", ["sb"], ["fl"]),
            node("Cast", ["fl"], ["s"], to=I64),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ]
    elif case == "loop_body":  # Loop(M = 1) whose body makes ConstantOfShape([n, n]) of the outer fed n
        inputs.append(vi("n", I64, []))
        inits.append(_c("m", 1))
        body = helper.make_graph(
            [
                node("ConstantOfShape", ["s"], ["b"], name="big"),
                node("Identity", ["c"], ["c2"]),
                node("Slice", ["b", "zero2", "two2", "ax"], ["bs"]),
            ],
            "body",
            [vi("it", I64, []), vi("c", B, [])],
            [vi("c2", B, []), vi("bs", F, None)],
            [_c("zero2", [0]), _c("two2", [2])],
        )
        nodes = [
            node("Unsqueeze", ["n", "ax"], ["su"]),
            node("Concat", ["su", "su"], ["s"], axis=0),
            node("Loop", ["m", ""], ["scan"], name="loop", body=body),
            node("Squeeze", ["scan", "ax"], ["e"]),
        ]
    elif case == "scan_body":  # Scan over x's rows whose body makes ConstantOfShape([n, n]) of the outer n
        inputs += [vi("n", I64, []), vi("x", F, [None, 1])]
        body = helper.make_graph(
            [
                node("ConstantOfShape", ["s"], ["b"], name="big"),
                node("Slice", ["b", "zero2", "two2", "ax"], ["bs"]),
                node("Identity", ["row"], ["ro"]),
            ],
            "body",
            [vi("row", F, [1])],
            [vi("bs", F, None), vi("ro", F, None)],
            [_c("zero2", [0]), _c("two2", [2])],
        )
        nodes = [
            node("Unsqueeze", ["n", "ax"], ["su"]),
            node("Concat", ["su", "su"], ["s"], axis=0),
            node("Scan", ["x"], ["scan", "rows"], name="scan", body=body, num_scan_inputs=1),
            node("Squeeze", ["scan", "ax"], ["e"]),
        ]
    else:
        raise ValueError(case)
    nodes.append(node("Gather", ["e", "i"], ["out"], name="g", axis=1))
    graph = helper.make_graph(nodes, "s52", inputs, [vi("out", out_type, None)], inits)
    m = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    return m.SerializeToString()


def feeds(case: str, n: int) -> dict[str, np.ndarray]:
    """Feeds making the big value n x n elements (``n`` a multiple of 100)."""
    i = np.array([1, -1], np.int64)
    if case == "reduceprod":
        return {"i": i, "x": np.zeros((n // 100, 100), np.float32)}
    if case == "float_scale":  # floor([n / 100 * 100.0 + 0.0, n / 100 * 100.0 + 0.75]): [n, n]
        return {"i": i, "x": np.zeros((n // 100, n // 100), np.float32)}
    if case == "abs_neg":
        return {"i": i, "n": np.array(-n, np.int64)}
    if case == "reduce_large":
        v = np.arange(100, dtype=np.int64)
        v[37] = n
        return {"i": i, "v": v}
    if case in ("where_compare", "mod_maxmin", "if_branch", "loop_body"):
        return {"i": i, "n": np.array(n, np.int64)}
    if case == "scan_body":  # one row: the body runs once
        return {"i": i, "n": np.array(n, np.int64), "x": np.zeros((1, 1), np.float32)}
    raise ValueError(case)


CASES = (
    "where_compare",
    "reduceprod",
    "mod_maxmin",
    "abs_neg",
    "reduce_large",
    "if_branch",
    "float_scale",
    "loop_body",
    "scan_body",
)
