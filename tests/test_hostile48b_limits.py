"""Hostile cases for the memory limit's static sizes (execute/plan/checks.py, model/outer_constants.py):
a shape read from a graph input that has an initializer default is the caller's to feed, so it is no
constant (onnxruntime neither folds it nor sizes anything from it when it builds the session); outer-scope
constants three Ifs deep still count; a subgraph's own initializer or input of the same name hides an
outer constant. Values against onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import TooLargeError
from tests.oracle import ort_run

HUGE = 50_000_000  # floats: 200 MB, over the 100 MB limit below
ENGINES = ["partitioned", "cpu"]


@pytest.fixture(autouse=True)
def _limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(100 * 2**20))


def _shape(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _fill(name: str, shape: str, out: str, inits: list[onnx.TensorProto] | None = None) -> onnx.GraphProto:
    """A branch making ``ConstantOfShape(shape)``."""
    node = helper.make_node("ConstantOfShape", [shape], [out], name=name)
    return helper.make_graph(
        [node], name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits
    )


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


COND = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
SHAPE_INPUT = helper.make_tensor_value_info("s", TensorProto.INT64, [1])


def _if(
    then: onnx.GraphProto, inits: list[onnx.TensorProto], inputs: list[onnx.ValueInfoProto]
) -> onnx.ModelProto:
    node = helper.make_node(
        "If", ["c"], ["y"], name="if", then_branch=then, else_branch=_fill("e", "one", "e")
    )
    return _model([node], inputs, [*inits, _shape("one", [2])])


def _check(model: onnx.ModelProto, engine: str, feeds: dict[str, np.ndarray]) -> None:
    session = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    for got, want in zip(session.run(None, feeds), ort_run(model, feeds, quiet=True), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_overridable_default_in_a_branch_is_no_constant(engine: str) -> None:
    """Refused by every engine before: the branch was sized from the default [HUGE] the feed replaces."""
    model = _if(_fill("t", "s", "t"), [_shape("s", [HUGE])], [COND, SHAPE_INPUT])
    _check(model, engine, {"c": np.array(True), "s": np.array([3])})


@pytest.mark.parametrize("engine", ENGINES)
def test_overridable_default_at_the_top_level_is_no_constant(engine: str) -> None:
    """The cpu engine refused it (its inference read the default); the partitioned engine did not."""
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")
    model = _model([node], [SHAPE_INPUT], [_shape("s", [HUGE])])
    _check(model, engine, {"s": np.array([4])})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_plain_initializer_three_ifs_deep_is_refused(engine: str) -> None:
    def nest(name: str, then: onnx.GraphProto) -> onnx.GraphProto:
        node = helper.make_node(
            "If", ["c"], [name], name=name, then_branch=then, else_branch=_fill(f"{name}e", "one", f"{name}e")
        )
        return helper.make_graph(
            [node], name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)]
        )

    model = _if(nest("l2", nest("l3", _fill("deep", "big", "d"))), [_shape("big", [HUGE])], [COND])
    with pytest.raises(TooLargeError) as info:
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    assert info.value.node == "if/then_branch/l2/then_branch/l3/then_branch/deep"
    assert info.value.op_type == "ConstantOfShape"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_branch_initializer_hides_the_outer_constant(engine: str) -> None:
    model = _if(_fill("t", "big", "t", [_shape("big", [5])]), [_shape("big", [HUGE])], [COND])
    _check(model, engine, {"c": np.array(True)})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_loop_carried_shape_hides_the_outer_constant(engine: str) -> None:
    """The body's input ``big`` (carried, [3] at the start) hides the main graph's initializer ``big``."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cid"),
            helper.make_node("Identity", ["big"], ["s_out"], name="sid"),
            helper.make_node("ConstantOfShape", ["big"], ["v"], name="fill"),
            helper.make_node("ReduceSum", ["v"], ["scan"], name="sum", keepdims=0),
        ],
        "body",
        [
            helper.make_tensor_value_info("it", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("big", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("scan", TensorProto.FLOAT, []),
        ],
    )
    loop = helper.make_node("Loop", ["M", "", "s0"], ["sf", "y"], name="loop", body=body)
    model = _model(
        [loop],
        [helper.make_tensor_value_info("M", TensorProto.INT64, [])],
        [_shape("s0", [3]), _shape("big", [HUGE])],
    )
    model.graph.output.insert(0, helper.make_tensor_value_info("sf", TensorProto.INT64, None))
    _check(model, engine, {"M": np.array(2)})


def _computed_shape_branch(op: str) -> onnx.GraphProto:
    """A branch making ``ConstantOfShape(op(half, two))`` from two main-graph initializers."""
    attrs = {"axis": 0} if op == "Concat" else {}
    nodes = [
        helper.make_node(op, ["half", "two"], ["sh"], name="arith", **attrs),
        helper.make_node("ConstantOfShape", ["sh"], ["t"], name="fill"),
    ]
    return helper.make_graph(nodes, "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("op", ["Mul", "Concat"])
def test_a_branch_shape_computed_from_outer_constants_is_refused(engine: str, op: str) -> None:
    """Built before: only a size-making node reading an outer constant itself was sized (onnxruntime
    allocates the 200 MB when the branch runs)."""
    model = _if(_computed_shape_branch(op), [_shape("half", [HUGE // 2]), _shape("two", [2])], [COND])
    with pytest.raises(TooLargeError) as info:
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    assert info.value.node == "if/then_branch/fill"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_small_branch_shape_computed_from_outer_constants_runs(engine: str) -> None:
    model = _if(_computed_shape_branch("Mul"), [_shape("half", [3]), _shape("two", [2])], [COND])
    _check(model, engine, {"c": np.array(True)})
    _check(model, engine, {"c": np.array(False)})


def test_a_top_level_shape_computed_from_constants_is_refused_by_the_cpu_engine() -> None:
    """onnxruntime folds ``ConstantOfShape(Mul(c, c))`` when it loads the model; the partitioned engine
    refused it, the cpu engine (onnx's inference without data propagation) built it."""
    nodes = [
        helper.make_node("Mul", ["half", "two"], ["sh"], name="mul"),
        helper.make_node("ConstantOfShape", ["sh"], ["y"], name="fill"),
    ]
    model = _model(nodes, [], [_shape("half", [HUGE // 2]), _shape("two", [2])])
    for engine in ENGINES:
        with pytest.raises(TooLargeError) as info:
            dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
        assert (info.value.node, info.value.op_type) == ("fill", "ConstantOfShape")
