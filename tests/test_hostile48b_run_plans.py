"""Hostile cases for the partitioned path's run plans (execute/plan/step_fast.py, cpu_step.py
``run_planned``): a run onnxruntime refuses in a CPU segment is not run again (a seeded random node
would draw twice, and every later run differ from onnxruntime's sequence); a chain of emulated nodes fed
indices that change sign, range, duplicates and shapes between steady runs, at each feature level, and a
model with nothing to emulate whose run fails, all against onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadInputError, IndexOutOfRangeError
from tests.oracle import ort_session


def _model(
    nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[object]]], outputs: list[str]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, elem, dims) for name, (elem, dims) in inputs.items()],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _outcome(run: object) -> list[np.ndarray] | str:
    """The outputs of ``run()``, or "refused" when it raises."""
    try:
        return list(run())  # type: ignore[operator]
    except Exception:  # both onnxruntime's classes and dmlshim's: compared as "refused"
        return "refused"


def _same(want: list[np.ndarray] | str, got: list[np.ndarray] | str) -> None:
    assert isinstance(want, str) == isinstance(got, str), (want, got)
    if isinstance(want, list) and isinstance(got, list):
        for w, g in zip(want, got, strict=True):
            assert w.dtype == g.dtype and w.shape == g.shape
            np.testing.assert_array_equal(g, w)


RANDOM = _model(
    [
        helper.make_node("RandomNormal", [], ["r"], name="rnd", shape=[6], seed=3.0),
        helper.make_node("Add", ["r", "x"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "s"], ["b"], name="reshape"),
        helper.make_node("Gather", ["b", "i"], ["y"], name="gather", axis=0),
    ],
    {"x": (TensorProto.FLOAT, [6]), "s": (TensorProto.INT64, [2]), "i": (TensorProto.INT64, [2])},
    ["y"],
)


def test_a_refused_segment_run_draws_its_random_values_once() -> None:
    """The failing run (Reshape to [4, 4]) drew the RandomNormal twice: the next runs had onnxruntime's
    values of one run later."""
    good = {"x": np.zeros(6, np.float32), "s": np.array([3, 2]), "i": np.array([2, 0])}
    bad = dict(good, s=np.array([4, 4]))
    ref = ort_session(RANDOM, quiet=True)
    session = dmlshim.InferenceSession(RANDOM.SerializeToString())
    for feeds in (good, good, bad, good, good, bad, good):
        _same(_outcome(lambda f=feeds: ref.run(None, f)), _outcome(lambda f=feeds: session.run(None, f)))
        assert session.last_run_record.path == "partitioned"


CHAIN = _model(
    [
        helper.make_node("Gather", ["x", "i"], ["g"], name="gather", axis=0),
        helper.make_node("Add", ["g", "one"], ["g1"], name="add"),
        helper.make_node("ScatterElements", ["g1", "j", "u"], ["s"], name="scatter", axis=1),
        helper.make_node("GatherElements", ["s", "k"], ["y"], name="gather_elements", axis=0),
        helper.make_node("ScatterND", ["s", "nd", "nu"], ["y2"], name="scatter_nd"),
    ],
    {
        "x": (TensorProto.FLOAT, ["N", "M"]),
        "i": (TensorProto.INT64, ["K"]),
        "j": (TensorProto.INT64, ["A", "B"]),
        "u": (TensorProto.FLOAT, ["A", "B"]),
        "k": (TensorProto.INT64, ["C", "D"]),
        "nd": (TensorProto.INT64, ["P", 1]),
        "nu": (TensorProto.FLOAT, ["P", "M2"]),
    },
    ["y", "y2"],
)


def _chain_feeds(rng: np.random.Generator, **changes: np.ndarray) -> dict[str, np.ndarray]:
    feeds = {
        "x": rng.standard_normal((5, 4)).astype(np.float32),
        "i": np.array([0, 2, 4]),
        "j": np.array([[0, 1], [2, 3], [1, 0]]),
        "k": np.array([[0, 1, 2, 0], [2, 2, 1, 0]]),
        "nd": np.array([[0], [2]]),
    }
    feeds.update(changes)
    feeds["u"] = rng.standard_normal(feeds["j"].shape).astype(np.float32)
    feeds["nu"] = rng.standard_normal((feeds["nd"].shape[0], 4)).astype(np.float32)
    return feeds


CHANGES: list[dict[str, np.ndarray]] = [
    {},
    {"i": np.array([-1, 0, -5])},
    {"i": np.array([5, 0, 1])},
    {"i": np.array([-6, 0, 1])},
    {"j": np.array([[0, 0], [3, 3], [1, 1]])},
    {"j": np.array([[-1, 0], [-4, 3], [1, -2]])},
    {"j": np.array([[4, 0], [0, 3], [1, 1]])},
    {"k": np.array([[-1, 1, 2, 0], [2, -3, 1, 0]])},
    {"k": np.array([[3, 1, 2, 0], [2, 2, 1, 0]])},
    {"nd": np.array([[1], [1]])},
    {"nd": np.array([[-1], [0]])},
    {"nd": np.array([[3], [0]])},
    {"i": np.array([0, 1, 2, 3, 4, 0])},
    {"j": np.array([[0, 2, 1], [1, 3, 0]]).T},  # not contiguous
    {},
]


@pytest.mark.parametrize("level", ["2_1", "3_0", "5_0"])
@pytest.mark.parametrize("check", [True, False])
def test_a_chain_of_emulated_nodes_after_steady_runs(level: str, check: bool) -> None:
    rng = np.random.default_rng(48)
    ref = ort_session(CHAIN, quiet=True)
    session = dmlshim.InferenceSession(CHAIN.SerializeToString(), feature_level=level)
    if not check:
        session.engine.drop_check()
    for _ in range(4):
        feeds = _chain_feeds(rng)
        _same(ref.run(None, feeds), session.run(None, feeds))
    for change in CHANGES:
        feeds = _chain_feeds(rng, **change)
        want = _outcome(lambda f=feeds: ref.run(None, f))
        if want == "refused":
            with pytest.raises(IndexOutOfRangeError) as info:
                session.run(None, feeds)
            assert info.value.node in {"gather", "scatter", "gather_elements", "scatter_nd"}
            assert info.value.op_type and info.value.value is not None
        else:
            _same(want, session.run(None, feeds))


def test_nothing_to_emulate_and_a_run_that_fails() -> None:
    """The plain runner's onnxruntime error is dmlshim's, naming the node, and later runs are answered."""
    model = _model(
        [
            helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
            helper.make_node("Relu", ["y"], ["z"], name="relu"),
        ],
        {"x": (TensorProto.FLOAT, ["N"]), "s": (TensorProto.INT64, [2])},
        ["z", "y"],
    )
    ref = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    good = {"x": np.arange(6, dtype=np.float32) - 3, "s": np.array([2, 3])}
    for _ in range(4):
        _same(ref.run(None, good), session.run(None, good))
    assert session.last_run_record.path == "onnxruntime cpu"
    with pytest.raises(BadInputError, match="reshape"):
        session.run(None, {"x": good["x"], "s": np.array([4, 4])})
    _same(ref.run([], good), session.run([], good))
    _same(ref.run(["z", "z"], good), session.run(["z", "z"], good))
