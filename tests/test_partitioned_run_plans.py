"""Run plans of the partitioned steps (execute/plan/step_fast.py): after the kernel ran a gather/scatter
at some input shapes and dtypes, later runs with those shapes are answered by the plan. Every run here is
checked against onnxruntime CPU (one thread) bit for bit, its record against counts made from the indices
in the test, and the runs that must still reach the kernel (new shapes or dtypes, an index out of range,
a negative index the feature level refuses, clamping) against a fresh session's kernel run."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import dmlshim
from dmlshim import IndexOutOfRangeError
from dmlshim.execute.plan import steps
from tests.oracle import assert_same_bits, ort_run

RNG = np.random.default_rng(36)


def _model(op: str, feeds: dict[str, np.ndarray], attrs: dict[str, Any], opset: int) -> onnx.ModelProto:
    """One node ``op`` over graph inputs of symbolic shapes (so that shapes may change between runs)."""
    inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(v.dtype), [f"{name}_{k}" for k in range(v.ndim)]
        )
        for name, v in feeds.items()
    ]
    node = helper.make_node(op, list(feeds), ["y"], name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name="y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _session(model: onnx.ModelProto, **kwargs: Any) -> dmlshim.InferenceSession:
    """A session answered by its partitioned steps only (its whole-model check dropped)."""
    session = dmlshim.InferenceSession(model.SerializeToString(), **kwargs)
    session.engine.drop_check()
    return session


def _kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the kernel runs of the emulated nodes (``run_translation``)."""
    calls: list[str] = []
    real = steps.run_translation

    def spy(t: Any, arrays: Any, **kwargs: Any) -> Any:
        calls.append(t.op_type)
        return real(t, arrays, **kwargs)

    monkeypatch.setattr(steps, "run_translation", spy)
    return calls


def _overwritten(targets: list[Any]) -> int:
    """Writes a later write to the same place overwrites (counted in the test, from the indices)."""
    return len(targets) - len({tuple(np.ravel(t).tolist()) for t in targets})


DATA = RNG.standard_normal((4, 5, 6)).astype(np.float32)

# op -> (opset, attrs, data, indices, updates or None)
CASES: dict[str, tuple[int, dict[str, Any], np.ndarray, np.ndarray, np.ndarray | None]] = {
    "Gather": (13, {"axis": 1}, DATA, np.array([[0, -1, 4], [-5, 2, 2]]), None),
    "GatherElements": (13, {"axis": 2}, DATA, RNG.integers(-6, 6, (4, 5, 3)), None),
    "GatherND": (13, {"batch_dims": 1}, DATA, np.array([[[0, -1], [3, 5]], [[-4, 0], [1, 1]]] * 2), None),
    "Scatter": (
        10,
        {"axis": 0},
        DATA,
        np.array([[[0, -1, 2, 3, -4, 1]] * 5]),
        np.ones((1, 5, 6), np.float32),
    ),
    "ScatterElements": (
        13,
        {"axis": 1},
        DATA,
        RNG.integers(-5, 5, (4, 2, 6)),
        RNG.standard_normal((4, 2, 6)),
    ),
    "ScatterND": (13, {}, DATA, np.array([[1, -1], [0, 2], [1, 4]]), RNG.standard_normal((3, 6))),
}


def _case(op: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    opset, attrs, data, indices, updates = CASES[op]
    feeds = {"data": data, "indices": indices.astype(np.int64)}
    if updates is not None:
        feeds["updates"] = updates.astype(data.dtype)
    return _model(op, feeds, attrs, opset), feeds


def _writes(op: str, feeds: dict[str, np.ndarray]) -> list[Any]:
    """Where each write of a scatter lands, in write order (the test's own count of duplicates)."""
    data, indices = feeds["data"], feeds["indices"]
    if op == "ScatterND":
        t = indices.shape[-1]
        return [np.mod(i, data.shape[:t]) for i in indices.reshape(-1, t)]
    axis = CASES[op][1]["axis"]
    return [
        (*pos[:axis], int(indices[pos]) % data.shape[axis], *pos[axis + 1 :])
        for pos in np.ndindex(indices.shape)
    ]


def _assert_run(session: dmlshim.InferenceSession, op: str, feeds: dict[str, np.ndarray]) -> list[Any]:
    """One run of ``op``'s case model against onnxruntime's, its record against the indices' own counts."""
    want = ort_run(_case(op)[0], feeds)
    got = session.run(None, feeds)
    assert_same_bits(got, want)
    record = session.last_run_record
    assert record.path == "partitioned"
    (node,) = record.nodes
    assert node.placement == "dml"
    assert node.negative_indices == bool((feeds["indices"] < 0).any())
    expected = _overwritten(_writes(op, feeds)) if op.startswith("Scatter") else 0
    assert node.duplicate_indices == expected
    return got


@pytest.mark.parametrize("op", sorted(CASES))
def test_steady_runs_take_the_plan_and_match_onnxruntime(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _case(op)
    calls = _kernel_calls(monkeypatch)
    session = _session(model)
    first = _assert_run(session, op, feeds)
    assert len(calls) == 1, "the first run at these shapes goes through the kernel"
    before = {k: v.copy() for k, v in feeds.items()}
    for _ in range(3):
        again = _assert_run(session, op, feeds)
        assert again[0] is not first[0] and not np.shares_memory(again[0], feeds["data"])
    assert len(calls) == 1, "later runs with the same shapes and dtypes take the plan"
    # the same shapes, other index values (non-negative, negative, repeated): the plan, still onnxruntime's
    for shift in (1, 2, 3):
        moved = dict(
            feeds, indices=np.where(feeds["indices"] >= 0, feeds["indices"], feeds["indices"] + shift)
        )
        if op == "GatherND":
            moved["indices"] = np.abs(feeds["indices"]) % 4 - shift % 2
        _assert_run(session, op, moved)
    assert len(calls) == 1
    assert all(np.array_equal(before[k], v) for k, v in feeds.items()), "the caller's arrays are unchanged"


def _out_of_range(op: str, feeds: dict[str, np.ndarray], value: int) -> dict[str, np.ndarray]:
    bad = feeds["indices"].copy()
    bad.reshape(-1)[-1] = value
    return dict(feeds, indices=bad)


@pytest.mark.parametrize("value", [100, -100])
@pytest.mark.parametrize("op", sorted(CASES))
def test_out_of_range_after_steady_runs_raises_as_the_kernel_does(
    op: str, value: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, feeds = _case(op)
    bad = _out_of_range(op, feeds, value)
    with pytest.raises(Exception):  # noqa: B017 (the oracle agrees that it is an error)
        ort_run(model, bad)
    with pytest.raises(IndexOutOfRangeError) as fresh:
        _session(model).run(None, bad)  # the kernel's first run: today's error
    session = _session(model)
    for _ in range(4):
        _assert_run(session, op, feeds)
    calls = _kernel_calls(monkeypatch)
    with pytest.raises(IndexOutOfRangeError) as steady:
        session.run(None, bad)
    assert calls, "an index out of range goes to the kernel"
    assert str(steady.value) == str(fresh.value)
    assert (steady.value.node, steady.value.tensor, steady.value.value) == (
        fresh.value.node,
        fresh.value.tensor,
        fresh.value.value,
    )
    assert steady.value.node == f"{op.lower()}_node" and steady.value.value == value
    _assert_run(session, op, feeds)  # and the session goes on answering


@pytest.mark.parametrize("op", sorted(CASES))
def test_shapes_changing_between_runs(op: str) -> None:
    model, feeds = _case(op)
    session = _session(model)
    _assert_run(session, op, feeds)
    _assert_run(session, op, feeds)
    bigger = dict(feeds, data=np.concatenate([feeds["data"], -feeds["data"]], axis=-1))  # (4, 5, 12)
    variants = [bigger, dict(feeds, data=feeds["data"][:, :, :4].copy())]  # (4, 5, 4)
    if op == "ScatterND":
        bigger["updates"] = np.concatenate([feeds["updates"]] * 2, axis=-1)
        variants[1]["updates"] = feeds["updates"][:, :4].copy()
    if op in ("Scatter", "ScatterElements", "GatherElements"):
        # the indices (and updates) follow the data on the other axes: their last axis cut too (and
        # GatherElements' axis is that one: its indices kept within it)
        cut = feeds["indices"][:, :, :4]
        variants = [dict(feeds, data=feeds["data"][:, :, :4].copy(), indices=np.clip(cut, -4, 3))]
        if "updates" in feeds:
            variants[0]["updates"] = feeds["updates"][:, :, :4].copy()
    if op == "Gather":
        variants.append(dict(feeds, indices=np.concatenate([feeds["indices"]] * 2, axis=0)))
    if op == "GatherND":
        variants[1]["indices"] = np.minimum(feeds["indices"], 3)  # the last axis is 4 long there
        twice = [np.concatenate([feeds[k]] * 2, axis=0) for k in ("data", "indices")]  # 8 batch rows
        variants.append(dict(feeds, data=twice[0], indices=twice[1]))
    for variant in variants:
        for _ in range(3):
            _assert_run(session, op, variant)
        _assert_run(session, op, feeds)  # back to the first shapes


@pytest.mark.parametrize("dtypes", [(np.float64, np.int32), (np.int8, np.int64), (np.float16, np.int32)])
@pytest.mark.parametrize("op", sorted(CASES))
def test_other_dtypes(op: str, dtypes: tuple[Any, Any]) -> None:
    data_type, index_type = dtypes
    if op in ("GatherND", "ScatterND") and index_type == np.int32:
        pytest.skip("ONNX GatherND and ScatterND take int64 indices only")
    opset, attrs, data, indices, updates = CASES[op]
    feeds = {"data": (data * 10).astype(data_type), "indices": indices.astype(index_type)}
    if updates is not None:
        feeds["updates"] = (updates * 10).astype(data_type)
    model = _model(op, feeds, attrs, opset)
    session = _session(model)
    for _ in range(3):
        got = session.run(None, feeds)
        assert_same_bits(got, ort_run(model, feeds))
        assert session.last_run_record.nodes[0].negative_indices == bool((indices < 0).any())


def test_a_feed_of_another_dtype_after_steady_runs_is_refused_as_onnxruntime_refuses() -> None:
    model, feeds = _case("GatherND")
    session = _session(model)
    for _ in range(3):
        _assert_run(session, "GatherND", feeds)
    other = dict(feeds, indices=feeds["indices"].astype(np.int32))
    with pytest.raises(Exception, match="tensor\\(int32\\)"):
        ort_run(model, other)
    with pytest.raises(dmlshim.BadInputError, match="int32"):
        session.run(None, other)
    _assert_run(session, "GatherND", feeds)


@pytest.mark.parametrize("op", sorted(CASES))
def test_below_fl_3_0_negative_indices_after_steady_runs_as_a_fresh_session(op: str) -> None:
    """Below 3_0 negative indices are not DirectML's (the host prepares UINT32 indices): whatever a
    fresh session answers to negative indices there, a session answers it after steady runs too."""
    model, feeds = _case(op)
    ok = dict(feeds, indices=np.where(feeds["indices"] < 0, 0, feeds["indices"]))
    fresh = _session(model, feature_level="2_1")
    want = fresh.run(None, feeds)
    session = _session(model, feature_level="2_1")
    for _ in range(4):
        assert_same_bits(session.run(None, ok), ort_run(model, ok))
    got = session.run(None, feeds)
    assert_same_bits(got, want)
    assert_same_bits(got, ort_run(model, feeds))
    assert session.last_run_record.nodes == fresh.last_run_record.nodes


@pytest.mark.parametrize("op", ["Gather", "GatherND", "ScatterElements"])
def test_clamp_mode_after_steady_runs_clamps_as_the_kernel_does(op: str) -> None:
    model, feeds = _case(op)
    bad = _out_of_range(op, feeds, 100)
    want = _session(model, index_mode="clamp").run(None, bad)  # the kernel's clamped run
    session = _session(model, index_mode="clamp")
    for _ in range(4):
        _assert_run(session, op, feeds)
    assert_same_bits(session.run(None, bad), want)
    # the clamped value: the last index (100) read or written as the dimension's last element
    clamped = bad["indices"].copy()
    clamped.reshape(-1)[-1] = -1 if op != "GatherND" else 1
    if op == "GatherND":
        clamped.reshape(-1)[-1] = CASES[op][2].shape[2] - 1
    assert_same_bits(want, ort_run(model, dict(bad, indices=clamped)))
    _assert_run(session, op, feeds)


def test_steps_around_cpu_segments_whose_shapes_follow_values() -> None:
    """Relu -> NonZero-sized Gather -> Neg: the gather's indices come from a CPU segment, and their
    count follows the feed's values, so one feed key has several gather shapes."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
        helper.make_node("Sub", ["idx", "one"], ["shifted"]),  # -1 for the first row: a negative index
        helper.make_node("Gather", ["r", "shifted"], ["g"], name="gather", axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6, 3]),
            helper.make_tensor_value_info("m", onnx.TensorProto.BOOL, [6]),
        ],
        [onnx.ValueInfoProto(name="y")],
        [helper.make_tensor("zero", onnx.TensorProto.INT64, [1], [0]), helper.make_tensor("one", 7, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    session = _session(model)
    for mask in ([1, 0, 1, 1, 0, 0], [1, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 0], [1] * 6):
        feeds = {"x": x, "m": np.array(mask, bool)}
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
        (node,) = [n for n in session.last_run_record.nodes if n.name == "gather"]
        assert node.negative_indices == bool(mask[0])


@pytest.mark.parametrize("data", [DATA[0, 0], DATA[0]], ids=["1-D", "2-D"])
def test_a_gather_of_a_scalar_index(data: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """x[..., -1] as exporters write it: a rank-0 index (a 0-d output from 1-D data)."""
    feeds = {"data": data.copy(), "indices": np.array(-1)}
    model = _model("Gather", feeds, {"axis": 0}, 13)
    calls = _kernel_calls(monkeypatch)
    session = _session(model)
    for index in (-1, -1, 0, -data.shape[0], data.shape[0] - 1):
        run = dict(feeds, indices=np.array(index))
        got = session.run(None, run)
        assert_same_bits(got, ort_run(model, run))
        assert type(got[0]) is np.ndarray and not np.shares_memory(got[0], data)
        assert session.last_run_record.nodes[0].negative_indices == (index < 0)
    assert len(calls) == 1
    with pytest.raises(IndexOutOfRangeError, match=str(data.shape[0])):
        session.run(None, dict(feeds, indices=np.array(data.shape[0])))
