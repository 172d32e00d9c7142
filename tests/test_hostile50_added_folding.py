"""Hostile round 50 (issue 35): ``SessionOptions.add_initializer`` over constants that onnxruntime's
constant folding does not compute.

onnxruntime folds a node of constant inputs with the model's own values (the added ones are applied after
its optimizations), but only a node it can compute:
- where its folding fails on out-of-range indices it either refuses the session (1.24) or skips the node
  (1.32), which then runs reading the added value, as does every node after it. dmlshim pointed such a
  node at the model's own value in every engine and failed the run (``index 7 at
  K__dmlshim_model_value[1] is out of range``) where onnxruntime returned the added indices' rows;
- a node its CPU provider has no kernel for at its types (``Relu`` of int64) is not folded but run through
  its function body after partitioning, reading the added value. dmlshim read the model's value there:
  a silent wrong value (rows 1, 2 of the model's indices instead of the added 2, 3), 1.24 and 1.32 alike.
Expected values: onnxruntime CPU's, built the same way (one thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

from .added_initializers import options_with_added

ENGINES = ("partitioned", "customop", "cpu")
F = TensorProto.FLOAT


def _options(module: Any, adds: dict[str, np.ndarray], level: Any = None) -> Any:
    return options_with_added(module, adds, level, quiet=True)


def _model(op: str, k: np.ndarray, through_relu: bool = False) -> bytes:
    inits = [
        numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W"),
        numpy_helper.from_array(k, "K"),
        numpy_helper.from_array(np.ones((1, 3), np.float32), "U"),
    ]
    indices = "K"
    nodes = []
    if through_relu:  # a node between: folded with the model's K where onnxruntime folds it
        nodes.append(helper.make_node("Relu", ["K"], ["Kr"]))
        indices = "Kr"
    inputs = {"Gather": ["W", indices], "GatherElements": ["W", indices], "ScatterND": ["W", indices, "U"]}
    attrs = {"GatherElements": {"axis": 0}}.get(op, {})
    nodes += [
        helper.make_node(op, inputs[op], ["g"], name="n", **attrs),
        helper.make_node("Relu", ["g"], ["r"]),  # after the node: not folded either when it is not
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "h50", [helper.make_tensor_value_info("x", F, None)],
                              [helper.make_tensor_value_info("y", F, None)], inits)  # fmt: skip
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()


_CASES = {  # op: (model's out-of-range indices, added in-range indices)
    "Gather": (np.array([1, 7], np.int64), np.array([1, 2], np.int64)),
    "GatherElements": (np.array([[1, 7, 0]], np.int64), np.array([[1, 2, 0]], np.int64)),
    "ScatterND": (np.array([[7]], np.int64), np.array([[2]], np.int64)),
}


def _outcome(module: Any, model: bytes, adds: dict[str, np.ndarray], level: Any, **kw: Any) -> Any:
    try:
        sess = module.InferenceSession(model, _options(module, adds, level), **kw)
    except Exception as exc:  # onnxruntime 1.24 refuses the session: its folding fails on the model's K
        return ("refused", exc)
    feeds = {"x": np.array(0.5, np.float32)}
    try:
        return ("values", [sess.run(None, feeds)[0] for _ in range(5)])
    except Exception as exc:
        return ("failed", exc)


@pytest.mark.parametrize("through_relu", [False, True], ids=["direct", "relu"])
@pytest.mark.parametrize("level", ["default", "disabled"])
@pytest.mark.parametrize("op", sorted(_CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_added_in_range_indices_over_out_of_range_model_constants(
    engine: str, op: str, level: str, through_relu: bool
) -> None:
    bad, good = _CASES[op]
    model = _model(op, bad, through_relu)
    lvl = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL if level == "disabled" else None
    want = _outcome(onnxruntime, model, {"K": good}, lvl, providers=["CPUExecutionProvider"])
    got = _outcome(dmlshim, model, {"K": good}, lvl, engine=engine)
    assert got[0] == want[0], (got, want)
    if want[0] == "values":
        for g in got[1]:
            np.testing.assert_array_equal(g, want[1][0])
    else:
        assert isinstance(got[1], type(want[1])), (got[1], want[1])


@pytest.mark.parametrize("op", sorted(_CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_added_out_of_range_indices_over_in_range_model_constants(engine: str, op: str) -> None:
    """The other way round: onnxruntime folds the node with the model's in-range value and never reads the
    added one at the default level; with folding disabled the run reads it and fails."""
    bad, good = _CASES[op]
    model = _model(op, good)
    for lvl in (None, onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL):
        want = _outcome(onnxruntime, model, {"K": bad}, lvl, providers=["CPUExecutionProvider"])
        got = _outcome(dmlshim, model, {"K": bad}, lvl, engine=engine)
        assert got[0] == want[0], (lvl, got, want)
        if want[0] == "values":
            for g in got[1]:
                np.testing.assert_array_equal(g, want[1][0])


def _relu_model(model_k: list[int], through_relu: bool, downstream: bool) -> bytes:
    inits = [
        numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W"),
        numpy_helper.from_array(np.array(model_k, np.int64), "K"),
    ]
    nodes = [helper.make_node("Relu", ["K"], ["Kr"])] if through_relu else []
    nodes.append(helper.make_node("Gather", ["W", "Kr" if through_relu else "K"], ["g"], name="n"))
    if downstream:
        nodes += [helper.make_node("Relu", ["g"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    else:
        nodes.append(helper.make_node("Add", ["g", "x"], ["y"]))
    graph = helper.make_graph(nodes, "h50", [helper.make_tensor_value_info("x", F, None)],
                              [helper.make_tensor_value_info("y", F, None)], inits)  # fmt: skip
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()


_PAIRS = [([1, 7], [1, 2]), ([1, 2], [2, 3]), ([1, 2], [1, 7]), ([-1, 7], [0, 0])]


@pytest.mark.parametrize(("model_k", "added_k"), _PAIRS, ids=[f"{m}-{a}" for m, a in _PAIRS])
@pytest.mark.parametrize("downstream", [False, True], ids=["add", "relu-add"])
@pytest.mark.parametrize("through_relu", [False, True], ids=["direct", "relu-int64"])
@pytest.mark.parametrize("engine", ENGINES)
def test_int64_relu_of_added_indices_is_not_folded(
    engine: str, through_relu: bool, downstream: bool, model_k: list[int], added_k: list[int]
) -> None:
    """``Relu`` of int64 has no CPU kernel (float, double, int8, int32): onnxruntime runs it on the added
    value; a Gather reading the constant directly is folded with the model's value."""
    model = _relu_model(model_k, through_relu, downstream)
    adds = {"K": np.array(added_k, np.int64)}
    want = _outcome(onnxruntime, model, adds, None, providers=["CPUExecutionProvider"])
    got = _outcome(dmlshim, model, adds, None, engine=engine)
    assert got[0] == want[0], (got, want)
    if want[0] == "values":
        for g in got[1]:
            np.testing.assert_array_equal(g, want[1][0])


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_relu_table_of_an_added_weight(engine: str, dtype: type) -> None:
    """The data side: ``Gather(Relu(T), i)`` with ``T`` replaced by add_initializer. int32 ``Relu`` has a
    kernel and is folded with the model's ``T``; int64 has none and reads the added ``T``."""
    tp = TensorProto.INT64 if dtype is np.int64 else TensorProto.INT32
    nodes = [
        helper.make_node("Relu", ["T"], ["Tr"]),
        helper.make_node("Gather", ["Tr", "i"], ["y"], name="g"),
    ]
    graph = helper.make_graph(
        nodes,
        "h50",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", tp, None)],
        [numpy_helper.from_array((np.arange(12) - 5).reshape(4, 3).astype(dtype), "T")],
    )
    model = helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()
    adds = {"T": np.full((4, 3), 50, dtype)}
    feeds = {"i": np.array([1, -1], np.int64)}
    ref = onnxruntime.InferenceSession(model, _options(onnxruntime, adds), providers=["CPUExecutionProvider"])
    want = ref.run(None, feeds)[0]
    sess = dmlshim.InferenceSession(model, _options(dmlshim, adds), engine=engine)
    for _ in range(5):
        got = sess.run(None, feeds)[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


_F0 = numpy_helper.from_array(np.array(0.0, np.float32), "f0")
_D0 = numpy_helper.from_array(np.array(0.0, np.float64), "d0")
_ELIMINATED = {  # what reads the added table T: onnxruntime's level-1 rules remove these nodes first
    "cast-same": [helper.make_node("Cast", ["T"], ["Tr"], to=F)],
    "cast-same-twice": [
        helper.make_node("Cast", ["T"], ["T1"], to=F),
        helper.make_node("Cast", ["T1"], ["Tr"], to=F),
    ],
    "identity-then-cast": [
        helper.make_node("Identity", ["T"], ["T1"]),
        helper.make_node("Cast", ["T1"], ["Tr"], to=F),
    ],
    "castlike-same": [helper.make_node("CastLike", ["T", "f0"], ["Tr"])],
    "dropout": [helper.make_node("Dropout", ["T"], ["Tr"])],
    "dropout-mask-unread": [helper.make_node("Dropout", ["T"], ["Tr", "mask"])],
    # and nodes that stay, folded with the model's T
    "cast-to-double-and-back": [
        helper.make_node("Cast", ["T"], ["T1"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["T1"], ["Tr"], to=F),
    ],
    "castlike-double": [
        helper.make_node("CastLike", ["T", "d0"], ["T1"]),
        helper.make_node("Cast", ["T1"], ["Tr"], to=F),
    ],
    "dropout-mask-read": [helper.make_node("Dropout", ["T"], ["Tr", "mask"])],
}


@pytest.mark.parametrize("case", sorted(_ELIMINATED))
@pytest.mark.parametrize("engine", ENGINES)
def test_nodes_onnxruntime_removes_before_folding_read_the_added_value(engine: str, case: str) -> None:
    """A Cast to the input's own type, a CastLike of the same type and a Dropout whose mask nothing reads
    are removed before constant folding (CastElimination, EliminateDropout): the Gather reads the added
    ``T``. dmlshim folded them with the model's ``T``: a silent wrong value in every engine."""
    nodes = [*_ELIMINATED[case], helper.make_node("Gather", ["Tr", "i"], ["y"], name="g")]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if case == "dropout-mask-read":
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, None))
    table = numpy_helper.from_array((np.arange(12) % 5 + 1).reshape(4, 3).astype(np.float32), "T")
    graph = helper.make_graph(
        nodes, "h50", [helper.make_tensor_value_info("i", TensorProto.INT64, [2])], outputs, [table, _F0, _D0]
    )
    model = helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()
    adds = {"T": np.full((4, 3), 7, np.float32)}
    feeds = {"i": np.array([1, -1], np.int64)}
    ref = onnxruntime.InferenceSession(model, _options(onnxruntime, adds), providers=["CPUExecutionProvider"])
    want = ref.run(None, feeds)
    sess = dmlshim.InferenceSession(model, _options(dmlshim, adds), engine=engine)
    for _ in range(5):
        for got, w in zip(sess.run(None, feeds), want, strict=True):
            assert got.dtype == w.dtype
            np.testing.assert_array_equal(got, w)


_SWEEP_INPUTS = {
    "Relu": ["K"],
    "Abs": ["K"],
    "Neg": ["K"],
    "Sign": ["K"],
    "Max": ["K", "three"],
    "Clip": ["K", "zero", "nine"],
    "Mod": ["K", "nine"],
    "CumSum": ["K", "axis"],
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.int16])
@pytest.mark.parametrize("op", sorted(_SWEEP_INPUTS))
@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_index_arithmetic_of_an_added_constant_as_onnxruntime(engine: str, op: str, dtype: type) -> None:
    """``Gather(W, Cast(op(K)))`` with ``K`` replaced by add_initializer: whether onnxruntime folds ``op``
    with the model's ``K`` depends on its CPU kernels at that type; dmlshim reads its registry."""
    inits = [
        numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "W"),
        numpy_helper.from_array(np.array([1, 2], dtype), "K"),
        numpy_helper.from_array(np.array(3, dtype), "three"),
        numpy_helper.from_array(np.array(0, dtype), "zero"),
        numpy_helper.from_array(np.array(9, dtype), "nine"),
        numpy_helper.from_array(np.array(0, np.int64), "axis"),
    ]
    nodes = [
        helper.make_node(op, _SWEEP_INPUTS[op], ["Kr"]),
        helper.make_node("Cast", ["Kr"], ["Ki"], to=TensorProto.INT64),
        helper.make_node("Gather", ["W", "Ki"], ["g"], name="n"),
        helper.make_node("Add", ["g", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "h50",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    adds = {"K": np.array([4, 5], dtype)}
    want = _outcome(onnxruntime, model.SerializeToString(), adds, None, providers=["CPUExecutionProvider"])
    got = _outcome(dmlshim, model.SerializeToString(), adds, None, engine=engine)  # refused where it is
    assert got[0] == want[0], (got, want)
    if want[0] == "values":
        for g in got[1]:
            np.testing.assert_array_equal(g, want[1][0])
