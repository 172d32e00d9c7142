"""Models of tests/test_memory_limit55.py (importable by its child processes): sizes that rest on a fed
value and are read by a gather, or made by a Loop run a fed number of times. ``feeds(case, n)`` feeds the
size ``n`` (a scalar ``n``); each model computes ``z``, a small value, or ``y``, the gather itself."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

V = helper.make_tensor_value_info
WORDS = [b"alpha", b"", b"a much longer string than fifteen bytes", "\u00e9".encode()]
TABLE = np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64) / 7

CASES = (
    "expand_gather",
    "range_gather",
    "constant_gather",
    "loop_gather",
    "loop_scan",
    "string_range_gather",
    "string_loop_gathernd",
    "string_scatter",
    "float_scatter",
)
"""Each refused at the node (and op) :data:`REFUSED` names under a 100 MB limit with :data:`BIG`."""

REFUSED = {
    "expand_gather": ("gather", "Gather"),
    "range_gather": ("gather", "Gather"),
    "constant_gather": ("gather", "GatherElements"),
    "loop_gather": ("gather", "Gather"),
    "loop_scan": ("loop", "Loop"),
    "string_range_gather": ("gather", "Gather"),
    "string_loop_gathernd": ("gather", "GatherND"),
    "string_scatter": ("scatter", "ScatterElements"),
    "float_scatter": ("scatter", "ScatterND"),
}

BIG = {
    "expand_gather": 10_000_000,  # indices 80 MB (fit), the gather 2.56 GB
    "range_gather": 10_000_000,  # Range and Mod 80 MB each, the gather 2.56 GB
    "constant_gather": 1_000_000,  # int32 indices [n, 16] 64 MB, the float64 GatherElements 128 MB
    "loop_gather": 400_000,  # the scan [n, 16] int64 51 MB, the gather 1.64 GB
    "loop_scan": 100_000,  # the scan [n, 1024] float32: 410 MB
    "string_range_gather": 4_000_000,  # 160 MB of strings (40 bytes each at least)
    "string_loop_gathernd": 4_000_000,  # 160 MB of strings
    "string_scatter": 3_000_000,  # its copy of the fed data: 120 MB of strings (the feed: 24 MB of pointers)
    "float_scatter": 30_000_000,  # its copy of the fed data: 120 MB
}


def _ints(name: str, value: object) -> object:
    return numpy_helper.from_array(np.asarray(value, np.int64), name)


def _loop(slice_node: object, elem: int) -> object:
    """A Loop run ``n`` times whose body passes its condition through and scans ``row`` (of type
    ``elem``: its ``slice_node`` of the iteration number ``iv``)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Identity", ["i"], ["iv"]),
            slice_node,
        ],
        "body",
        [V("i", TensorProto.INT64, []), V("cond_in", TensorProto.BOOL, [])],
        [V("cond_out", TensorProto.BOOL, []), V("row", elem, None)],
    )
    return helper.make_node("Loop", ["n", ""], ["rows"], body=body, name="loop")


def _graph(case: str) -> tuple[list, list, int]:
    """The nodes, initializers and output element type of ``case``."""
    words = helper.make_tensor("words", TensorProto.STRING, [4], WORDS)
    table = numpy_helper.from_array(TABLE, "table")
    if case == "expand_gather":
        nodes = [
            helper.make_node("Unsqueeze", ["n", "axes"], ["shape"]),
            helper.make_node("Expand", ["seven", "shape"], ["idx"], name="expand"),
            helper.make_node("Gather", ["table", "idx"], ["y"], name="gather", axis=0),
            helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
        ]
        return nodes, [table, _ints("axes", [0]), _ints("seven", 7)], TensorProto.FLOAT
    if case in ("range_gather", "string_range_gather"):
        data, rows = ("words", 4) if case.startswith("string") else ("table", 1000)
        nodes = [
            helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range"),
            helper.make_node("Mod", ["r", "rows"], ["idx"]),
            helper.make_node("Gather", [data, "idx"], ["y"], name="gather", axis=0),
        ]
        inits = [_ints("zero", 0), _ints("one", 1), _ints("rows", rows), words if rows == 4 else table]
        if rows == 4:
            return nodes, inits, TensorProto.STRING
        nodes.append(helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0))
        return nodes, inits, TensorProto.FLOAT
    if case == "constant_gather":
        value = numpy_helper.from_array(np.array([3], np.int32), "v")
        nodes = [
            helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
            helper.make_node("Concat", ["n1", "sixteen"], ["shape"], axis=0),
            helper.make_node("ConstantOfShape", ["shape"], ["idx"], name="constant", value=value),
            helper.make_node("GatherElements", ["data", "idx"], ["y"], name="gather", axis=0),
            helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
        ]
        data = numpy_helper.from_array(np.arange(8 * 16, dtype=np.float64).reshape(8, 16) / 3, "data")
        return nodes, [data, _ints("axes", [0]), _ints("sixteen", [16])], TensorProto.DOUBLE
    if case in ("loop_gather", "loop_scan"):
        if case == "loop_scan":
            loop = _loop(helper.make_node("Cast", ["wide"], ["row"], to=TensorProto.FLOAT), TensorProto.FLOAT)
            wide = numpy_helper.from_array(np.arange(1024, dtype=np.int64), "wide")
            nodes = [loop, helper.make_node("ReduceSum", ["rows"], ["z"], keepdims=0)]
            return nodes, [wide], TensorProto.FLOAT
        loop = _loop(helper.make_node("Add", ["iv", "zeros16"], ["row"]), TensorProto.INT64)
        nodes = [
            loop,
            helper.make_node("Mod", ["rows", "rows_k"], ["idx"]),
            helper.make_node("Gather", ["table", "idx"], ["y"], name="gather", axis=0),
            helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
        ]
        zeros = numpy_helper.from_array(np.zeros(16, np.int64), "zeros16")
        return nodes, [table, zeros, _ints("rows_k", 1000)], TensorProto.FLOAT
    if case == "string_loop_gathernd":
        loop = _loop(helper.make_node("Mod", ["iv", "four1"], ["row"]), TensorProto.INT64)
        nodes = [loop, helper.make_node("GatherND", ["words", "rows"], ["y"], name="gather")]
        return nodes, [words, _ints("four1", [4])], TensorProto.STRING
    raise ValueError(case)


def _scatter(case: str) -> bytes:
    """``y = Scatter*(data, ix, upd)``, its data fed (strings, or floats reduced to ``z``)."""
    string = case.startswith("string")
    elem = TensorProto.STRING if string else TensorProto.FLOAT
    op = "ScatterElements" if string else "ScatterND"
    nodes = [helper.make_node(op, ["data", "ix", "upd"], ["y"], name="scatter")]
    out = V("y", elem, ["m"])
    if not string:
        nodes.append(helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0))
        out = V("z", elem, [])
    inputs = [
        V("data", elem, ["m"]),
        V("ix", TensorProto.INT64, ["k"] if string else ["k", 1]),
        V("upd", elem, ["k"]),
    ]
    built = helper.make_model(
        helper.make_graph(nodes, case, inputs, [out]), opset_imports=[helper.make_opsetid("", 18)]
    )
    built.ir_version = 10
    return built.SerializeToString()


def model(case: str) -> bytes:
    """The serialized model of ``case`` (IR 10, opset 18)."""
    if case.endswith("_scatter"):
        return _scatter(case)
    nodes, inits, elem = _graph(case)
    out = V("y", elem, ["m"]) if elem == TensorProto.STRING else V("z", elem, [])
    graph = helper.make_graph(nodes, case, [V("n", TensorProto.INT64, [])], [out], inits)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    built.ir_version = 10
    return built.SerializeToString()


def feeds(case: str, n: int) -> dict[str, np.ndarray]:
    """The feeds of ``case`` making its sized value ``n`` long."""
    if case == "string_scatter":  # one str object n times: 8 bytes a pointer, its copy 40 at least
        data = np.array(["ab"] * n, dtype=object)
        return {"data": data, "ix": np.array([1, 0], np.int64), "upd": np.array(["x", "\u00e9"], object)}
    if case == "float_scatter":
        data = np.zeros(n, np.float32)  # pages untouched until something copies it
        data[:5] = [0.5, 1, -2, 3, 4][:n]
        return {"data": data, "ix": np.array([[1], [0]], np.int64), "upd": np.array([7.5, -2], np.float32)}
    return {"n": np.array(n, np.int64)}
