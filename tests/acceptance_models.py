"""Models onnxruntime runs that onnx.checker (or an earlier dmlshim) refused, and model-local functions.

Each builder returns ``(model, feeds)``; expected outputs always come from onnxruntime CPU
(:mod:`tests.oracle`). Every gather/scatter node reads in-range indices from ``feeds``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.oracle import IR_VERSION

Built = tuple[onnx.ModelProto, dict[str, np.ndarray]]
RNG = np.random.default_rng(1919)


def _vi(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(graph: onnx.GraphProto, opset: int = 17, **kwargs: object) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset), *kwargs.pop("extra_opsets", [])]  # type: ignore[list-item]
    ir = kwargs.pop("ir_version", IR_VERSION)
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir, **kwargs)  # type: ignore[arg-type]


def ir3_initializer_not_input() -> Built:
    """IR 3 (opset 8): a Gather whose table is an initializer that is not listed as a graph input
    (onnx.checker: "in initializer but not in graph input")."""
    table = RNG.standard_normal((6, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0, name="lookup"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "ir3",
        [_vi("idx", TensorProto.INT64, [4])],
        [_vi("y", TensorProto.FLOAT, [4, 3])],
        initializer=[numpy_helper.from_array(table, "table")],
    )
    model = _model(graph, opset=8, ir_version=3)
    return model, {"idx": np.array([5, 0, 2, 2], dtype=np.int64)}


def shapeless_input() -> Built:
    """A graph input with an element type and no shape (onnx.checker refuses it, onnxruntime runs it)."""
    nodes = [helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1, name="ge")]
    graph = helper.make_graph(
        nodes,
        "shapeless",
        [_vi("x", TensorProto.FLOAT, None), _vi("idx", TensorProto.INT64, [2, 3])],
        [_vi("y", TensorProto.FLOAT, [2, 3])],
    )
    feeds = {
        "x": RNG.standard_normal((2, 5)).astype(np.float32),
        "idx": np.array([[4, 0, 1], [3, 3, 0]], dtype=np.int64),
    }
    return _model(graph), feeds


def unsorted_nodes() -> Built:
    """Nodes listed consumers first (onnxruntime sorts them); a scatter, a gather, an unnamed node."""
    nodes = [
        helper.make_node("Gather", ["s", "gidx"], ["y"], axis=0, name="gather_last"),
        helper.make_node("ScatterND", ["r", "sidx", "upd"], ["s"], name="scatter_middle"),
        helper.make_node("Relu", ["x"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes,
        "unsorted",
        [
            _vi("x", TensorProto.FLOAT, [4, 3]),
            _vi("sidx", TensorProto.INT64, [2, 1]),
            _vi("upd", TensorProto.FLOAT, [2, 3]),
            _vi("gidx", TensorProto.INT64, [3]),
        ],
        [_vi("y", TensorProto.FLOAT, [3, 3])],
    )
    feeds = {
        "x": RNG.standard_normal((4, 3)).astype(np.float32),
        "sidx": np.array([[3], [1]], dtype=np.int64),
        "upd": RNG.standard_normal((2, 3)).astype(np.float32),
        "gidx": np.array([1, 3, 0], dtype=np.int64),
    }
    return _model(graph), feeds


def bare_type_annotations() -> Built:
    """value_info and a graph output with an element type and no shape: unknown rank, not rank 0."""
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1, name="gather_cols"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "bare",
        [_vi("x", TensorProto.FLOAT, [3, 4]), _vi("idx", TensorProto.INT64, [2, 2])],
        [_vi("y", TensorProto.FLOAT, None)],
        value_info=[_vi("g", TensorProto.FLOAT, None)],
    )
    feeds = {
        "x": RNG.standard_normal((3, 4)).astype(np.float32),
        "idx": np.array([[3, 0], [1, 1]], dtype=np.int64),
    }
    return _model(graph), feeds


def sparse_table() -> Built:
    """A Gather whose table is a sparse_initializer."""
    dense = np.zeros((5, 4), dtype=np.float32)
    dense[1, 2], dense[4, 0], dense[3, 3] = 1.5, -2.0, 7.0
    flat = np.flatnonzero(dense)
    values = numpy_helper.from_array(dense.ravel()[flat], "table")
    indices = numpy_helper.from_array(flat.astype(np.int64), "table_indices")
    sparse = helper.make_sparse_tensor(values, indices, [5, 4])
    nodes = [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0, name="sparse_lookup")]
    graph = helper.make_graph(
        nodes,
        "sparse",
        [_vi("idx", TensorProto.INT64, [3])],
        [_vi("y", TensorProto.FLOAT, [3, 4])],
        sparse_initializer=[sparse],
    )
    return _model(graph), {"idx": np.array([4, 1, 3], dtype=np.int64)}


def scatter_at_opset(opset: int) -> onnx.ModelProto:
    """``Scatter`` at ``opset``: it exists up to opset 10; from 11 on onnxruntime refuses the model."""
    nodes = [helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=0, name="old_scatter")]
    graph = helper.make_graph(
        nodes,
        "scatter",
        [
            _vi("d", TensorProto.FLOAT, [3, 3]),
            _vi("i", TensorProto.INT64, [1, 3]),
            _vi("u", TensorProto.FLOAT, [1, 3]),
        ],
        [_vi("y", TensorProto.FLOAT, [3, 3])],
    )
    return _model(graph, opset=opset)


def external_weights_model() -> Built:
    """An Add of a (3, 4) weight kept as external data; feeds for it."""
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    nodes = [
        helper.make_node("Add", ["w", "x"], ["t"], name="add"),
        helper.make_node("Gather", ["t", "idx"], ["y"], axis=0, name="pick"),
    ]
    graph = helper.make_graph(
        nodes,
        "external",
        [_vi("x", TensorProto.FLOAT, [3, 4]), _vi("idx", TensorProto.INT64, [2])],
        [_vi("y", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32), "idx": np.array([2, 0], dtype=np.int64)}
    return _model(graph), feeds


# --- model-local functions ------------------------------------------------------------------------

LOCAL = "local.fn"


def _fn(name: str, inputs: list[str], outputs: list[str], nodes: list[onnx.NodeProto], **kw: object):
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)]
    return helper.make_function(LOCAL, name, inputs, outputs, nodes, opset_imports=opsets, **kw)  # type: ignore[arg-type]


def _call(fn: str, inputs: list[str], outputs: list[str], name: str = "", **attrs: object) -> onnx.NodeProto:
    return helper.make_node(fn, inputs, outputs, domain=LOCAL, name=name, **attrs)


def functions_model() -> Built:
    """Local functions: ``Pick`` (a Gather with an attribute-reference axis and a ScatterElements) called
    twice with different shapes, ``Outer`` calling ``Pick`` (nested), ``Branchy`` with an If whose
    branches gather; calls named and unnamed."""
    pick = _fn(
        "Pick",
        ["data", "idx", "sidx", "upd"],
        ["out"],
        [
            helper.make_node("Gather", ["data", "idx"], ["g"], name="pick_gather", axis=0),
            helper.make_node("ScatterElements", ["g", "sidx", "upd"], ["s"], name="pick_scatter", axis=1),
            helper.make_node("Relu", ["s"], ["out"]),
        ],
    )
    outer = _fn(
        "Outer",
        ["data", "idx", "sidx", "upd"],
        ["out"],
        [
            helper.make_node("Constant", [], ["nd"], value=numpy_helper.from_array(np.array([[1], [0]]))),
            _call("Pick", ["data", "idx", "sidx", "upd"], ["p"], name="inner_call"),
            helper.make_node("GatherND", ["p", "nd"], ["out"], name="outer_gather_nd"),
        ],
    )
    then_g = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["tg"], name="then_gather", axis=1)],
        "then",
        [],
        [_vi("tg", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["eg"], name="else_gather", axis=0)],
        "else",
        [],
        [_vi("eg", TensorProto.FLOAT, None)],
    )
    branchy = _fn(
        "Branchy",
        ["d", "i", "c"],
        ["o"],
        [helper.make_node("If", ["c"], ["o"], name="branch", then_branch=then_g, else_branch=else_g)],
    )
    nodes = [
        _call("Pick", ["a", "ia", "sa", "ua"], ["y1"], name="pick_a"),
        _call("Pick", ["b", "ib", "sb", "ub"], ["y2"]),
        _call("Outer", ["a", "ia", "sa", "ua"], ["y3"], name="outer"),
        _call("Branchy", ["sq", "ib", "cond"], ["y4"], name="branchy"),
    ]
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        nodes,
        "functions",
        [
            _vi("a", f32, [5, 3]),
            _vi("ia", i64, [2]),
            _vi("sa", i64, [2, 1]),
            _vi("ua", f32, [2, 1]),
            _vi("b", f32, [4, 6, 2]),
            _vi("ib", i64, [3]),
            _vi("sb", i64, [3, 2, 2]),
            _vi("ub", f32, [3, 2, 2]),
            _vi("sq", f32, [4, 4]),
            _vi("cond", TensorProto.BOOL, []),
        ],
        [_vi(n, f32, None) for n in ("y1", "y2", "y3", "y4")],
    )
    model = _model(graph, extra_opsets=[helper.make_opsetid(LOCAL, 1)], functions=[pick, outer, branchy])
    feeds = {
        "a": RNG.standard_normal((5, 3)).astype(np.float32),
        "ia": np.array([4, 1], dtype=np.int64),
        "sa": np.array([[2], [0]], dtype=np.int64),
        "ua": RNG.standard_normal((2, 1)).astype(np.float32),
        "b": RNG.standard_normal((4, 6, 2)).astype(np.float32),
        "ib": np.array([3, 0, 2], dtype=np.int64),
        "sb": RNG.integers(0, 6, (3, 2, 2)).astype(np.int64),
        "ub": RNG.standard_normal((3, 2, 2)).astype(np.float32),
        "sq": RNG.standard_normal((4, 4)).astype(np.float32),
        "cond": np.array(True),
    }
    return model, feeds


FUNCTION_GATHER_SCATTER = 9
"""Gather/scatter nodes of :func:`functions_model` once expanded: 2 x Pick (2 each), Outer (Pick's 2 and a
GatherND), Branchy's two branch Gathers."""
