"""hostile9: the whole-model check's given and lean gathers (execute/proofs/gather_given.py) against what a
hostile caller builds and feeds. Every run's outputs (or its refusal) must be onnxruntime CPU's (one
intra-op thread) bit for bit, on every emulating engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from tests.oracle import ort_session
from tests.test_hostile8_given_gathers import _agree, _model

vi = helper.make_tensor_value_info
RNG = np.random.default_rng(9)


@pytest.mark.parametrize("level", ["2_1", "5_0"])
def test_a_lean_gathernd_whose_constant_indices_have_no_column(level: str) -> None:
    """Constant GatherND indices of shape (2, 0) select the whole data twice; the range proof of the lean
    path reshaped them to (-1, 0), which numpy cannot, and the run died in a bare ValueError."""
    nodes = [helper.make_node("GatherND", ["x", "idx"], ["g"]), helper.make_node("Neg", ["g"], ["y"])]
    idx = numpy_helper.from_array(np.zeros((2, 0), np.int64), "idx")
    model = _model(nodes, [vi("x", T.FLOAT, ["N", 40000])], ["y"], [idx])
    x = RNG.standard_normal((3, 40000)).astype(np.float32)
    _agree(model, [{"x": x}] * 5 + [{"x": x[:1]}], feature_level=level)


def _named_like_a_shape_output(rows: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model with its own value 'r__dmlshim_shape' beside 'r', the data of a gather whose indices
    (``Clip(i, 0)``) are proved non-negative: the check's shape output for 'r' has that name."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["r__dmlshim_shape"], name="sigmoid"),
        helper.make_node("Clip", ["i", "zero"], ["ic"], name="clip"),
        helper.make_node("Gather", ["r", "ic"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    inputs = [vi("x", T.FLOAT, ["N", 40000]), vi("i", T.INT64, [4])]
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    model = _model(nodes, inputs, ["y", "r__dmlshim_shape"], [zero])
    feeds = {"x": RNG.standard_normal((rows, 40000)).astype(np.float32), "i": np.array([1, 5, 0, 2])}
    return model, feeds


def test_a_value_named_like_the_checks_shape_output_is_the_models_own() -> None:
    """The check fetched the model's float 'r__dmlshim_shape' as the shape of 'r' (a bare TypeError,
    'unhashable type: list', on every run)."""
    model, feeds = _named_like_a_shape_output(6)
    _agree(model, [feeds] * 4)


def test_inspect_at_a_run_reads_shapes_beside_a_value_named_like_its_shape_outputs(tmp_path: Path) -> None:
    """inspect --inputs added a Shape node writing 'r__dmlshim_shape', which the model defines: onnxruntime
    refused the model ("Duplicate definition"), so inspect did."""
    model, feeds = _named_like_a_shape_output(6)
    path, inputs = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, str(path))
    np.savez(inputs, **feeds)
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "inspect", str(path), "--inputs", str(inputs), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (node,) = [n for n in json.loads(done.stdout)["nodes"] if n["name"] == "gather"]
    assert "[6,40000]" in json.dumps(node).replace(" ", ""), node


X2 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
X3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5
NO_SHAPE = {
    "Gather": (
        {"axis": -1},
        [{"x": X2, "i": np.array([2, 0])}] * 4
        + [
            {"x": X3, "i": np.array([3, -4])},
            {"x": X3[0, 0], "i": np.array(1)},
            {"x": X2, "i": np.array([[2]])},
        ],
    ),
    "GatherElements": (
        {"axis": -1},
        [{"x": X2, "i": np.array([[2], [0]])}] * 4
        + [
            {"x": X3, "i": np.full((2, 3, 1), 3)},
            {"x": X3[0, 0], "i": np.array([1])},
            {"x": X2, "i": np.array([2, 0])},
        ],
    ),
    "GatherND": (
        {},
        [{"x": X2, "i": np.array([[1, 2]])}] * 4
        + [
            {"x": X3, "i": np.array([[1, 2, 3]])},
            {"x": X3, "i": np.array([1])},
            {"x": X2, "i": np.array([[1, 2, 0]])},
        ],
    ),
}


@pytest.mark.parametrize("op", sorted(NO_SHAPE))
def test_gathers_of_inputs_without_shapes_change_rank_after_the_proved_runs(op: str) -> None:
    attrs, runs = NO_SHAPE[op]
    nodes = [helper.make_node(op, ["x", "i"], ["y"], name="gather", **attrs)]
    model = _model(nodes, [vi("x", T.FLOAT, None), vi("i", T.INT64, None)], ["y"])
    _agree(model, runs)


def test_output_subsets_and_run_options_changing_after_the_proved_runs() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "idx"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
        helper.make_node("GatherElements", ["x", "ie"], ["ge"], axis=1, name="elements"),
    ]
    inputs = [vi("x", T.FLOAT, [6, 4]), vi("idx", T.INT64, [3]), vi("ie", T.INT64, [6, 2])]
    model = _model(nodes, inputs, ["y", "g", "ge"])
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    good = {"x": x, "idx": np.array([5, 0, 2]), "ie": np.tile(np.array([[3, 0]]), (6, 1))}
    negative = {"x": x, "idx": np.array([5, -1, 2]), "ie": good["ie"] - 4}
    oracle = ort_session(model)
    options = ort.RunOptions()
    options.log_severity_level = 3
    for level in ("2_1", "5_0"):
        session = dmlshim.InferenceSession(model.SerializeToString(), feature_level=level)
        subsets = [None, ["y"], ["g"], ["ge", "y"], ["y"], ["g"], ["ge"], None, ["y", "y"]]
        for i, names in enumerate(subsets * 2):
            feeds = good if i < 9 else negative
            run_options = options if i % 2 else None
            got = session.run(names, feeds, run_options)
            want = oracle.run(names, feeds)
            assert [(a.shape, a.tobytes()) for a in got] == [(w.shape, w.tobytes()) for w in want], (level, i)


def test_inspect_records_the_bodies_beside_a_value_named_like_its_records(tmp_path: Path) -> None:
    """inspect --inputs records the If branches that run under names 'dmlshim.rec.N'; with the model's own
    value 'dmlshim.rec.1' the recording run was refused ('Duplicate definition') and the branch that ran
    was reported as one that did not, from static shapes."""
    branches = {
        side: helper.make_graph(
            [helper.make_node("Gather", ["x", "k"], ["t"], axis=0, name=f"{side}_gather")],
            side,
            [],
            [vi("t", T.FLOAT, None)],
        )
        for side in ("then", "else")
    }
    nodes = [
        helper.make_node("Neg", ["x"], ["dmlshim.rec.1"], name="neg"),
        helper.make_node(
            "If", ["c"], ["o"], then_branch=branches["then"], else_branch=branches["else"], name="if"
        ),
    ]
    inputs = [vi("x", T.FLOAT, [5, 4]), vi("k", T.INT64, [2]), vi("c", T.BOOL, [])]
    model = _model(nodes, inputs, ["o", "dmlshim.rec.1"])
    path, feeds = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, str(path))
    np.savez(feeds, x=np.ones((5, 4), np.float32), k=np.array([1, 2]), c=np.array(True))
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "inspect", str(path), "--inputs", str(feeds), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    shapes = {n["name"]: n["shapes"] for n in json.loads(done.stdout)["nodes"]}
    assert shapes["if/then_branch/then_gather"] == "run", shapes
