"""The DirectML provider's failure on a Concat growing a Loop's state declared with a static shape
(``EP_FAILS_CONCAT_GROWING_STATIC_LOOP_STATE``, met first in ``onnx_models/real/maskrcnn_torchscript.onnx``).

The table's prediction is checked on small models built here; tests marked ``real`` run DirectML 1.15.4
itself and are skipped without the stack. Expected values come from onnxruntime CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.errors import DmlShimError
from dmlshim.translate.ep_refusals import session_refusals
from tests.oracle import IR_VERSION, ort_run

MODELS = Path(__file__).resolve().parent.parent / "onnx_models"
CODE = "EP_FAILS_CONCAT_GROWING_STATIC_LOOP_STATE"
D = 4

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _grow_model(
    state_dims: list[int | str], y_dims: list[int | str], trips: int | None = 2, rows: int = 0
) -> onnx.ModelProto:
    """``out = Loop(trips, state=zeros[rows,D,D]: Concat(state, Unsqueeze(y)))`` (torchscript's list
    append); the body's state input is declared with ``state_dims`` (initial value's shape or symbols);
    ``trips=None``: the trip count is a graph input."""

    def value(name: str, elem: int, dims: list[int | str] | None) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, dims)

    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["axes"], value_ints=[0]),
            helper.make_node("Unsqueeze", ["y", "axes"], ["y1"]),
            helper.make_node("Concat", ["state", "y1"], ["state_out"], axis=0, name="grow"),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [value("i", TensorProto.INT64, []), value("cond", TensorProto.BOOL, []),
         value("state", TensorProto.FLOAT, state_dims)],
        [value("cond_out", TensorProto.BOOL, []), value("state_out", TensorProto.FLOAT, ["a", "b", "c"])],
    )  # fmt: skip
    const = {
        "keep_going": np.array(True),
        "empty": np.zeros((rows, D, D), np.float32),
    }
    if trips is not None:
        const["trips"] = np.array(trips, np.int64)
    nodes = [
        helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v)) for k, v in const.items()
    ]
    nodes.append(
        helper.make_node("Loop", ["trips", "keep_going", "empty"], ["out"], body=body, name="append")
    )
    inputs = [value("y", TensorProto.FLOAT, y_dims)]
    if trips is None:
        inputs.append(value("trips", TensorProto.INT64, []))
    graph = helper.make_graph(nodes, "grow", inputs, [value("out", TensorProto.FLOAT, ["n", D, D])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _y() -> np.ndarray:
    return np.arange(D * D, dtype=np.float32).reshape(D, D) / 7


def test_onnxruntime_cpu_runs_the_growing_state_whatever_its_declared_shape() -> None:
    for state_dims in ([0, D, D], ["s", D, D]):
        out = ort_run(_grow_model(state_dims, ["h", "w"]), {"y": _y()})[0]
        assert out.shape == (2, D, D) and np.array_equal(out, np.stack([_y(), _y()]))


def test_table_names_the_concat_growing_a_static_loop_state() -> None:
    for y_dims in (["h", "w"], [D, D]):
        found = session_refusals(_grow_model([0, D, D], y_dims))
        assert [(name, r.code, r.op_type, r.when) for name, r in found] == [
            ("append/body/grow", CODE, "Concat", "run")
        ]
    assert session_refusals(_grow_model(["s", D, D], ["h", "w"])) == ()
    assert session_refusals(_grow_model(["s", "p", "q"], [D, D])) == ()


@pytest.mark.parametrize(("trips", "refused"), [(0, False), (1, False), (2, True), (3, True), (None, True)])
def test_table_leaves_out_a_constant_trip_count_of_one(trips: int | None, refused: bool) -> None:
    # One iteration runs right on DirectML (test_real_directml_runs_a_single_iteration_right, issue 35);
    # a trip count fed at run time may be 2 or more.
    found = session_refusals(_grow_model([0, D, D], ["h", "w"], trips=trips))
    assert [r.code for _, r in found] == ([CODE] if refused else [])


def test_trip_count_an_initializer_a_feed_may_replace_is_dynamic() -> None:
    model = _grow_model([0, D, D], ["h", "w"], trips=None)
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "trips"))
    assert ort_run(model, {"y": _y(), "trips": np.array(2, np.int64)})[0].shape == (2, D, D)
    assert [r.code for _, r in session_refusals(model)] == [CODE]


def test_trip_count_of_one_from_two_graphs_out() -> None:
    # The Loop inside an If's branch; its trip count is a Constant of the model's graph.
    inner = _grow_model([0, D, D], ["h", "w"], trips=1).graph
    branch = helper.make_graph(list(inner.node), "then", [], list(inner.output))
    trips_node = next(n for n in branch.node if n.output[0] == "trips")
    branch.node.remove(trips_node)
    graph = helper.make_graph(
        [
            trips_node,
            helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
            helper.make_node("If", ["yes"], ["out"], then_branch=branch, else_branch=branch, name="pick"),
        ],
        "outer",
        list(inner.input),
        list(inner.output),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    assert ort_run(model, {"y": _y()})[0].shape == (1, D, D)
    assert session_refusals(model) == ()
    model.graph.node[0].attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(2, np.int64)))
    assert ort_run(model, {"y": _y()})[0].shape == (2, D, D)
    assert {n for n, _ in session_refusals(model)} == {
        "pick/then_branch/append/body/grow",
        "pick/else_branch/append/body/grow",
    }


def test_table_names_concat_1558_of_maskrcnn() -> None:
    model = onnx.load(str(MODELS / "real/maskrcnn_torchscript.onnx"), load_external_data=False)
    assert [(n, r.code) for n, r in session_refusals(model)] == [("Loop_1383/body/Concat_1558", CODE)]


@real
@pytest.mark.parametrize("rows", [0, 1])
def test_real_directml_fails_on_a_dynamic_concat_growing_a_static_loop_state(rows: int) -> None:
    model = _grow_model([rows, D, D], ["h", "w"], rows=rows)
    assert ort_run(model, {"y": _y()})[0].shape == (rows + 2, D, D)
    sess = InferenceSession(model, engine="directml")
    with pytest.raises(DmlShimError, match="80070057") as err:
        sess.run(None, {"y": _y()})
    assert CODE in str(err.value)


@real
def test_real_directml_runs_the_same_loop_when_the_state_is_declared_dynamic() -> None:
    model = _grow_model(["s", D, D], ["h", "w"])
    got = InferenceSession(model, engine="directml").run(None, {"y": _y()})[0]
    assert np.array_equal(got, ort_run(model, {"y": _y()})[0])


@real
@pytest.mark.parametrize("trips", [2, 3])
def test_real_directml_returns_a_wrong_shape_when_every_concat_input_is_static(trips: int) -> None:
    model = _grow_model([0, D, D], [D, D], trips=trips)
    want = ort_run(model, {"y": _y()})[0]
    got = InferenceSession(model, engine="directml").run(None, {"y": _y()})[0]
    assert want.shape == (trips, D, D) and got.shape == (1, D, D)
    assert np.array_equal(got[0], want[-1])


@real
def test_real_directml_runs_a_single_iteration_right() -> None:
    model = _grow_model([0, D, D], ["h", "w"], trips=1)
    got = InferenceSession(model, engine="directml").run(None, {"y": _y()})[0]
    assert np.array_equal(got, ort_run(model, {"y": _y()})[0])


@real
@pytest.mark.parametrize("trips", [1, 2])
def test_real_directml_with_a_trip_count_fed_at_run_time(trips: int) -> None:
    # The table refuses the model (the feed may be 2 or more): DirectML runs 1 right and fails on 2.
    model = _grow_model([0, D, D], ["h", "w"], trips=None)
    feeds = {"y": _y(), "trips": np.array(trips, np.int64)}
    want = ort_run(model, feeds)[0]
    sess = InferenceSession(model, engine="directml")
    if trips == 1:
        assert np.array_equal(sess.run(None, feeds)[0], want)
    else:
        with pytest.raises(DmlShimError, match="80070057"):
            sess.run(None, feeds)
