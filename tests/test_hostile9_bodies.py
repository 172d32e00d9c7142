"""hostile9: If/Loop/Scan body outputs of the custom-op engine (execute/lowering/body_outputs.py) declared
for the right body, whatever the owners' output names."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

pytest.importorskip("onnxruntime_extensions")

from tests.test_hostile8_given_gathers import _agree, _model

vi = helper.make_tensor_value_info


def _branch(name: str, k: str, extra: bool) -> object:
    nodes = [helper.make_node("Gather", ["x", k], ["t"], axis=0, name=f"{name}_gather")]
    outputs = [vi("t", T.FLOAT, None)]
    if extra:
        nodes.append(helper.make_node("Identity", ["x"], ["u"], name=f"{name}_id"))
        outputs.append(vi("u", T.FLOAT, None))
    return helper.make_graph(nodes, name, [], outputs)


@pytest.mark.parametrize("reverse", [False, True])
def test_ifs_whose_output_names_join_alike_keep_their_own_body_shapes(reverse: bool) -> None:
    """One If writes 'p,q', another 'p' and 'q': the bodies were told apart by the owner's outputs joined
    with ',', so both Ifs' branches took one of them's shapes ([3, 4] for a branch gathering 2 rows) and
    onnxruntime refused the run of the lowered model, where it runs the caller's."""
    ifs = [
        helper.make_node(
            "If", ["c"], ["p,q"], then_branch=_branch("a_then", "k1", False),
            else_branch=_branch("a_else", "k1", False), name="if1",
        ),
        helper.make_node(
            "If", ["c"], ["p", "q"], then_branch=_branch("b_then", "k2", True),
            else_branch=_branch("b_else", "k2", True), name="if2",
        ),
    ]  # fmt: skip
    inits = [
        numpy_helper.from_array(np.array([0, 1], np.int64), "k1"),
        numpy_helper.from_array(np.array([2, 3, 4], np.int64), "k2"),
    ]
    inputs = [vi("x", T.FLOAT, [5, 4]), vi("c", T.BOOL, [])]
    model = _model(ifs[::-1] if reverse else ifs, inputs, ["p,q", "p", "q"], inits)
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    _agree(model, [{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)}], engine="customop")


def test_a_static_body_output_written_beside_an_outer_value_named_like_its_computed_copy() -> None:
    """A static If-branch output 't' computed by a custom op is written by a Reshape from 't_computed';
    only the branch's own names were avoided, so with the graph input 't_computed' read in the branch the
    lowered model was no SSA and onnxruntime refused it."""

    def branch(name: str) -> object:
        nodes = [
            helper.make_node("Gather", ["x", "k"], ["t"], axis=0, name=f"{name}_gather"),
            helper.make_node("Neg", ["t_computed"], ["u"], name=f"{name}_neg"),
        ]
        return helper.make_graph(nodes, name, [], [vi("t", T.FLOAT, [2, 4]), vi("u", T.FLOAT, [2, 4])])

    node = helper.make_node(
        "If", ["c"], ["o1", "o2"], then_branch=branch("a"), else_branch=branch("b"), name="if"
    )
    inputs = [vi("x", T.FLOAT, [5, 4]), vi("c", T.BOOL, []), vi("t_computed", T.FLOAT, [2, 4])]
    model = _model([node], inputs, ["o1", "o2"], [numpy_helper.from_array(np.array([1, 3], np.int64), "k")])
    x, outer = np.arange(20, dtype=np.float32).reshape(5, 4), np.full((2, 4), 100.0, np.float32)
    runs = [{"x": x, "c": np.array(c), "t_computed": outer} for c in (True, False)]
    _agree(model, runs, engine="customop")


def test_a_loop_of_no_iteration_keeps_the_shape_onnxruntime_infers_past_a_custom_op() -> None:
    """A Loop's scan output is a ReduceSum of a body Gather: onnxruntime infers it [3] per iteration through
    the Gather, so no iteration gives [0, 3]. In the lowered model the Gather is a custom op, which no
    inference passes, and only outputs a custom op writes were declared: the custom-op engine returned
    [0]."""
    body = helper.make_graph(
        [
            helper.make_node("Range", ["zero", "it", "one"], ["r"], name="range"),
            helper.make_node("Gather", ["x", "r"], ["g"], axis=1, name="gather"),
            helper.make_node("Identity", ["c"], ["c2"], name="cond"),
            helper.make_node("ReduceSum", ["g", "axes"], ["sum"], keepdims=0, name="sum"),
        ],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, [])],
        [vi("c2", T.BOOL, []), vi("sum", T.FLOAT, None)],
    )
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    loop = helper.make_node("Loop", ["n", "cc"], ["out"], body=body, name="loop")
    inputs = [vi("x", T.FLOAT, [3, 4]), vi("n", T.INT64, []), vi("cc", T.BOOL, [])]
    model = _model([loop], inputs, ["out"], inits)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    runs = [{"x": x, "n": np.array(n), "cc": np.array(True)} for n in (0, 3, 0, 4)]
    _agree(model, runs, engine="customop")


def test_threads_feeding_a_rank0_input_at_changing_ranks_share_one_custom_op_session() -> None:
    """The fed-rank copies (execute/engines/fed_rank.py) built and used from four threads at once, each
    run's rank drawn at random: every run is onnxruntime's, Shape and Size of the input included."""
    import threading

    import dmlshim
    from tests.oracle import ort_session
    from tests.test_hostile8_given_gathers import _outcome

    nodes = [
        helper.make_node("Gather", ["x", "k"], ["g"], axis=1, name="gather"),
        helper.make_node("Shape", ["k"], ["shape"], name="shape"),
        helper.make_node("Size", ["k"], ["size"], name="size"),
    ]
    model = _model(nodes, [vi("x", T.FLOAT, [3, 4]), vi("k", T.INT64, [])], ["g", "shape", "size"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ks = [
        np.array(1),
        np.array([1, 2]),
        np.array([[0], [3]]),
        np.array([[[2]]]),
        np.array(-1),
        np.array([[1, -2, 3]]),
    ]
    oracle = ort_session(model)
    session = dmlshim.InferenceSession(model.SerializeToString(), engine="customop")
    wrong: list[tuple[int, int]] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for j in range(12):
            feeds = {"x": x, "k": ks[int(rng.integers(len(ks)))]}
            got = _outcome(lambda feeds=feeds: session.run(None, feeds))
            if got != _outcome(lambda feeds=feeds: oracle.run(None, feeds)):
                wrong.append((seed, j))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


@pytest.mark.parametrize("where", ["value_info", "output"])
@pytest.mark.parametrize("stale", [[4, 5], [20], [1, 5, 4]])
def test_a_stale_annotation_of_a_gathers_input_runs_as_onnxruntime_runs_it(
    where: str, stale: list[int]
) -> None:
    """The custom-op engine made the descriptor for a shape a stale value_info (or graph output) declared
    for the gather's data ([4, 5] for a [5, 4] value): onnxruntime runs the model (it warns at most), the
    kernel refused every run ('InputTensor must be shaped like its Sizes [4, 5]')."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "i"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    model = _model(nodes, [vi("x", T.FLOAT, ["N", 4]), vi("i", T.INT64, [2])], ["y"])
    getattr(model.graph, where).append(vi("r", T.FLOAT, stale))
    model.graph.value_info.append(vi("g", T.FLOAT, [1]))
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    runs = [{"x": x, "i": np.array([1, 3])}] * 2 + [{"x": x[:2], "i": np.array([1, -2])}]
    _agree(model, runs, engine="customop")
