"""Hostile round 12: models whose gather indices come from nodes that draw random values.

onnxruntime's seeded random nodes go on drawing one sequence from run to run within a session; a
dmlshim session must give run k the values onnxruntime's session gives its run k (the whole-model
check, its lean session and the trial's switches each started the sequence again: a seeded
RandomUniformLike's run 5 gave run 1's indices), and every run's output must be the gather of the
indices that same run drew. Expected values: onnxruntime's CPU session of the same model, run as often.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from dmlshim.model.random_ops import draws_random
from tests.oracle import IR_VERSION, same_bits


def _model(kind: str, seeded: bool) -> onnx.ModelProto:
    """Relu(x) gathered by indices a random node draws (output ``idx`` too) and by fed ones."""
    seed = {"seed": 3.0} if seeded else {}
    nodes = [helper.make_node("Relu", ["x"], ["a"])]
    inputs = [
        helper.make_tensor_value_info("x", T.FLOAT, [8, 16]),
        helper.make_tensor_value_info("idx2", T.INT64, [3]),
    ]
    inits = []
    if kind == "uniform":
        nodes += [
            helper.make_node("RandomUniformLike", ["like"], ["r"], low=0.0, high=8.0, dtype=T.FLOAT, **seed),
            helper.make_node("Floor", ["r"], ["fl"]),
            helper.make_node("Cast", ["fl"], ["idx"], to=T.INT64),
        ]
        inputs.append(helper.make_tensor_value_info("like", T.FLOAT, [1, 6]))
    elif kind == "multinomial":
        nodes.append(
            helper.make_node("Multinomial", ["logits"], ["idx"], sample_size=4, dtype=T.INT64, **seed)
        )
        inputs.append(helper.make_tensor_value_info("logits", T.FLOAT, [1, 8]))
    else:  # Dropout in training mode: its mask picks rows 0/1
        nodes += [
            helper.make_node(
                "Dropout", ["like", "ratio", "train"], ["d", "mask"], **({"seed": 3} if seeded else {})
            ),
            helper.make_node("Cast", ["mask"], ["idx"], to=T.INT64),
        ]
        inputs.append(helper.make_tensor_value_info("like", T.FLOAT, [1, 6]))
        inits = [
            helper.make_tensor("ratio", T.FLOAT, [], [0.5]),
            helper.make_tensor("train", T.BOOL, [], [True]),
        ]
    nodes += [
        helper.make_node("Gather", ["a", "idx"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Gather", ["a", "idx2"], ["g2"], axis=0),
        helper.make_node("Abs", ["g2"], ["y2"]),
    ]
    outputs = [
        helper.make_tensor_value_info(n, t, None)
        for n, t in (("y", T.FLOAT), ("idx", T.INT64), ("y2", T.FLOAT))
    ]
    graph = helper.make_graph(nodes, "random_indices", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _feeds(kind: str, run: int, x: np.ndarray) -> dict[str, np.ndarray]:
    # runs alternate between indices every proof takes and repeated ones
    feeds = {"x": x, "idx2": np.array([1, 2, 3]) if run % 2 else np.array([7, 0, 7])}
    if kind == "multinomial":
        feeds["logits"] = np.zeros((1, 8), np.float32)
    else:
        feeds["like"] = np.ones((1, 6), np.float32)
    return feeds


@pytest.mark.parametrize("seeded", [True, False])
@pytest.mark.parametrize("kind", ["uniform", "multinomial", "dropout"])
def test_random_indices_follow_onnxruntimes_sequence_run_by_run(kind: str, seeded: bool) -> None:
    data = _model(kind, seeded).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    for run in range(12):
        feeds = _feeds(kind, run, x)
        ours = session.run(None, feeds)
        expected = reference.run(None, feeds)
        # whatever was drawn, the output is the gather of what this run drew
        assert same_bits(ours[0], -np.maximum(x, 0)[ours[1]]), run
        assert same_bits(ours[2], np.abs(np.maximum(x, 0)[feeds["idx2"]])), run
        if seeded:
            for mine, theirs in zip(ours, expected, strict=True):
                assert same_bits(mine, theirs), f"run {run}: not onnxruntime's draw"


def test_dropout_out_of_training_mode_draws_nothing() -> None:
    model = _model("dropout", True)
    assert draws_random(model)
    model.graph.initializer[1].CopyFrom(helper.make_tensor("train", T.BOOL, [], [False]))
    assert not draws_random(model)


def test_seeded_random_nodes_in_if_branches_follow_onnxruntimes_sequence() -> None:
    """A seeded RandomUniformLike and a seeded Bernoulli, in the two branches of an If, draw the indices."""
    then = helper.make_graph(
        [
            helper.make_node(
                "RandomUniformLike", ["like"], ["r"], low=0.0, high=8.0, dtype=T.FLOAT, seed=5.0
            ),
            helper.make_node("Floor", ["r"], ["fl"]),
            helper.make_node("Cast", ["fl"], ["o"], to=T.INT64),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("o", T.INT64, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Bernoulli", ["p"], ["o2"], seed=2.0, dtype=T.INT64)],
        "else",
        [],
        [helper.make_tensor_value_info("o2", T.INT64, None)],
    )
    nodes = [
        helper.make_node("If", ["c"], ["idx"], then_branch=then, else_branch=other),
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Gather", ["a", "idx"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
        helper.make_node("Gather", ["a", "idx2"], ["g2"], axis=0),
        helper.make_node("Abs", ["g2"], ["y2"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", T.FLOAT, [8, 4]),
        helper.make_tensor_value_info("c", T.BOOL, []),
        helper.make_tensor_value_info("like", T.FLOAT, [5]),
        helper.make_tensor_value_info("p", T.FLOAT, [5]),
        helper.make_tensor_value_info("idx2", T.INT64, [2]),
    ]
    outputs = [
        helper.make_tensor_value_info(n, t, None)
        for n, t in (("y", T.FLOAT), ("idx", T.INT64), ("y2", T.FLOAT))
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "branches", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=IR_VERSION,
    )
    assert draws_random(model)
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    reference = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(data)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    for run in range(12):
        feeds = {
            "x": x,
            "c": np.array(run % 3 != 0),
            "like": np.zeros(5, np.float32),
            "p": np.full(5, 0.5, np.float32),
            "idx2": np.array([1, 2]) if run % 2 else np.array([3, 3]),
        }
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
