"""hostile8: the custom-op engine's rank-0 graph inputs fed at another rank (engines/fed_rank.py).

onnxruntime's default session folds a ``Shape`` (and ``Size``) of an input declared rank 0 from the
declaration: ``Shape(k)`` is ``[]`` and ``Size(k)`` is 1 whatever rank ``k`` is fed at, while the nodes that
read ``k``'s values compute at the fed rank. The engine's copy lowered for the fed rank declared the input
at that rank, so onnxruntime folded nothing there and the custom-op engine returned ``[2]`` where
onnxruntime returns ``[]``. Expected values: onnxruntime CPU with the same options (one intra-op thread)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime_extensions")

from dmlshim import InferenceSession
from tests.oracle import IR_VERSION

X = np.arange(28, dtype=np.float32).reshape(4, 7)
# onnxruntime's refusal of a body output computed at another shape than the one it allocated: 1.32's
# words, then 1.24's
BODY_SHAPE_REFUSED = "computed output shape|OrtValue shape verification failed"


def _model() -> bytes:
    nodes = [
        helper.make_node("Shape", ["k"], ["s"]),
        helper.make_node("Size", ["k"], ["z"]),
        helper.make_node("Gather", ["x", "k"], ["g"], axis=1),
        helper.make_node("GatherElements", ["x", "e"], ["ge"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "rank0_shape",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
            helper.make_tensor_value_info("k", TensorProto.INT64, []),
            helper.make_tensor_value_info("e", TensorProto.INT64, [1, 7]),
        ],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("s", 7), ("z", 7), ("g", 1), ("ge", 1))],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION
    ).SerializeToString()


def _options(level: ort.GraphOptimizationLevel | None) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    if level is not None:
        opts.graph_optimization_level = level
    return opts


KS = [np.array([1, 2]), np.array(3), np.array([[1], [2]]), np.array([0]), np.ones((1,) * 9, np.int64)]


@pytest.mark.parametrize(
    "level", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL], ids=["default", "disabled"]
)
def test_shape_of_a_rank0_input_fed_at_another_rank_is_onnxruntimes(
    level: ort.GraphOptimizationLevel | None,
) -> None:
    model = _model()
    oracle = ort.InferenceSession(model, _options(level), providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, _options(level), engine="customop")
    e = np.array([[3, 0, 1, 2, 3, 0, 1]], np.int64)
    for k in [*KS, *KS]:  # alternating ranks, each lowered once and then reused
        feeds = {"x": X, "k": k.astype(np.int64), "e": e}
        want = oracle.run(None, feeds)
        got = sess.run(None, feeds)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), (k.shape, g, w)


def test_an_overridable_rank0_initializer_fed_at_another_rank_runs() -> None:
    # An initializer that is also a graph input may be fed at any rank (onnxruntime runs the nodes after it
    # at the fed rank); the custom-op engine failed in its lowered Reshape for the declared scalar.
    nodes = [helper.make_node("Gather", ["x", "k"], ["g"], axis=1), helper.make_node("Shape", ["k"], ["s"])]
    graph = helper.make_graph(
        nodes,
        "rank0_initializer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
            helper.make_tensor_value_info("k", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("g", 1), ("s", 7))],
        [numpy_helper.from_array(np.array(2, np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    model = model.SerializeToString()
    oracle = ort.InferenceSession(model, _options(None), providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, _options(None), engine="customop")
    for feeds in (
        {"x": X},
        {"x": X, "k": np.array([1, 2])},
        {"x": X, "k": np.array(3)},
        {"x": X, "k": np.array([[6]])},
        {"x": X},
    ):
        want = oracle.run(None, feeds)
        got = sess.run(None, feeds)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), (feeds, g, w)


def test_a_shapeless_overridable_initializer_fed_at_other_shapes_runs() -> None:
    # Declared as an input of no shape, the initializer's [2] was the lowering's static shape: a feed of
    # [[1, 2]] came back as a [4, 2] where onnxruntime gives [4, 1, 2], and [1, 2, 3] or a scalar failed.
    nodes = [helper.make_node("Gather", ["x", "k"], ["g"], axis=1), helper.make_node("Shape", ["k"], ["s"])]
    graph = helper.make_graph(
        nodes,
        "shapeless_initializer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
            helper.make_tensor_value_info("k", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("g", 1), ("s", 7))],
        [numpy_helper.from_array(np.array([1, 2], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    model = model.SerializeToString()
    oracle = ort.InferenceSession(model, _options(None), providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, _options(None), engine="customop")
    ks = [
        None,
        np.array([[1, 2]]),
        np.array(3),
        np.array([1, 2, 3]),
        np.array([0, 6]),
        None,
        np.array([[1, 2]]),
    ]
    for k in ks:
        feeds = {"x": X} if k is None else {"x": X, "k": k}
        want = oracle.run(None, feeds)
        got = sess.run(None, feeds)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), (feeds, g, w)


def test_a_rank0_input_fed_at_rank1_into_an_if_branch_is_refused_as_onnxruntime_refuses() -> None:
    then = helper.make_graph(
        [helper.make_node("Gather", ["x", "k"], ["t"], axis=1)],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "k"], ["t0"], axis=0),
            helper.make_node("ReduceSum", ["t0"], ["t"], keepdims=0),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
        helper.make_tensor_value_info("k", TensorProto.INT64, []),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    nodes = [helper.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "rank0_in_if", inputs, [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION
    ).SerializeToString()
    feeds = {"x": X, "k": np.array([1, 2], np.int64), "c": np.array(True)}
    oracle = ort.InferenceSession(model, _options(None), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=BODY_SHAPE_REFUSED):
        oracle.run(None, feeds)
    sess = InferenceSession(model, _options(None), engine="customop")
    with pytest.raises(Exception, match=BODY_SHAPE_REFUSED):
        sess.run(None, feeds)
    # the else branch's output is a scalar at any rank of k: onnxruntime runs it, and so does the engine
    feeds["c"] = np.array(False)
    want = oracle.run(None, feeds)
    got = sess.run(None, feeds)
    assert got[0].shape == want[0].shape and got[0].tobytes() == want[0].tobytes()


def _gather_body(name: str, out: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Gather", ["x", "k"], [out], axis=1)],
        name,
        [],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
    )


def _control_flow_model(nodes: list[onnx.NodeProto]) -> bytes:
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
        helper.make_tensor_value_info("k", TensorProto.INT64, []),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    graph = helper.make_graph(nodes, "fed_rank_bodies", inputs, [helper.make_tensor_value_info("o", 1, None)])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION
    ).SerializeToString()


def _nested_if() -> bytes:
    inner = helper.make_node(
        "If", ["c"], ["t"], then_branch=_gather_body("ithen", "ti"), else_branch=_gather_body("ielse", "te")
    )
    outer_then = helper.make_graph([inner], "othen", [], [helper.make_tensor_value_info("t", 1, None)])
    return _control_flow_model(
        [helper.make_node("If", ["c"], ["o"], then_branch=outer_then, else_branch=_gather_body("oelse", "t"))]
    )


def _loop_scan_output() -> bytes:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Gather", ["x", "k"], ["g"], axis=1),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, None),
        ],
    )
    n = helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(np.array(2, np.int64)))
    return _control_flow_model([n, helper.make_node("Loop", ["n", "c"], ["o"], body=body)])


@pytest.mark.parametrize("build", [_nested_if, _loop_scan_output], ids=["nested_if", "loop_scan_output"])
@pytest.mark.parametrize(
    "level", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL], ids=["default", "disabled"]
)
def test_a_rank0_input_fed_at_other_ranks_into_bodies_is_onnxruntimes(
    build: Callable[[], bytes], level: ort.GraphOptimizationLevel | None
) -> None:
    # onnxruntime holds a body's output to the shape it inferred from k's declaration ([4]): an If refuses a
    # branch computing [4, 2] (nested: both levels), a Loop runs its iterations at the fed rank but returns
    # [0, 4] when it runs none (the engine returned [0]).
    model = build()
    oracle = ort.InferenceSession(model, _options(level), providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, _options(level), engine="customop")
    for c in (True, False):
        for k in (np.array(1), np.array([1, 2]), np.array([[1, 2], [3, 0]])):
            feeds = {"x": X, "k": k, "c": np.array(c)}
            try:
                want = oracle.run(None, feeds)
            except Exception as exc:  # the refusal the engine must repeat
                assert re.search(BODY_SHAPE_REFUSED, str(exc)), exc
                with pytest.raises(Exception, match=BODY_SHAPE_REFUSED):
                    sess.run(None, feeds)
                continue
            got = sess.run(None, feeds)
            assert got[0].shape == want[0].shape and got[0].tobytes() == want[0].tobytes(), (c, k.shape)


def test_a_stale_static_body_output_declaration_runs_as_onnxruntime_runs_it() -> None:
    # The then branch's output is declared [4] where its Gather computes [4, 2]: onnxruntime merges the two
    # (the shape left unknown) and runs. The lowered branch kept the declaration alone, and
    # onnxruntime-extensions aborted the process when the custom op's [4, 2] met the [4] the If allocated.
    branch = helper.make_graph(
        [helper.make_node("Gather", ["x", "k"], ["t"], axis=1)],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])],
    )
    other = helper.make_graph(
        [helper.make_node("Gather", ["x", "k"], ["u"], axis=0)],
        "else",
        [],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 7])],
    )
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7]),
        helper.make_tensor_value_info("k", TensorProto.INT64, [2]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["o"], then_branch=branch, else_branch=other)],
        "stale_branch_output",
        inputs,
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION
    ).SerializeToString()
    oracle = ort.InferenceSession(model, _options(None), providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, _options(None), engine="customop")
    for c in (True, False):
        feeds = {"x": X, "k": np.array([1, 3], np.int64), "c": np.array(c)}
        want = oracle.run(None, feeds)
        got = sess.run(None, feeds)
        assert got[0].shape == want[0].shape and got[0].tobytes() == want[0].tobytes(), c
