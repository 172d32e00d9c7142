"""The lean check (issue 36, item 2): once every emulated node is given, the whole-model check runs a
session that lists only what the proofs read; outputs stay onnxruntime's, bit for bit, and any run whose
indices stop proving a node goes back to the full check (or the partitions) with onnxruntime's values.

Expected values come from onnxruntime's own CPU session of the unmodified model (one intra-op thread).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.engines import partitioned
from dmlshim.execute.plan.steps import PROVE_RUNS
from tests.oracle import same_bits

REAL = Path(__file__).resolve().parent.parent / "onnx_models" / "real"
GIVEN = "output_from_onnxruntime"


def _ort(model: onnx.ModelProto | str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _check(session: dmlshim.InferenceSession) -> object:
    return session._engine._check


@pytest.mark.parametrize(
    "name",
    ["bert_torchscript", "t5_torchscript", "gnn_scatter_torchscript", "llama_static_cache_torchscript"],
)
def test_corpus_models_bit_identical_over_ten_runs(name: str) -> None:
    path = str(REAL / f"{name}.onnx")
    with np.load(str(REAL / f"{name}.npz")) as data:
        feeds = {k: data[k] for k in data.files}
    reference = _ort(path)
    session = dmlshim.InferenceSession(path)
    for run in range(1, 11):
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), f"run {run}"
    check = _check(session)
    # proved on runs 1-3, every node given on run 4, the lean check from run 5 on
    assert check.lean_runs == 10 - (PROVE_RUNS + 1)
    record = session.last_run_record
    assert record.path == "whole-model check"


def _model() -> onnx.ModelProto:
    """Relu -> ScatterElements(fed indices, fed updates) -> Sigmoid -> Gather(fed indices) -> Neg: three
    CPU segments around two emulated nodes, so the check answers from the first run."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("ScatterElements", ["a", "sidx", "upd"], ["s"], axis=0),
        helper.make_node("Sigmoid", ["s"], ["b"]),
        helper.make_node("Gather", ["b", "gidx"], ["g"], axis=0),
        helper.make_node("Neg", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "lean",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("sidx", TensorProto.INT64, ["k", 4]),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, ["k", 4]),
            helper.make_tensor_value_info("gidx", TensorProto.INT64, ["m"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _feeds(
    n: int = 6, gidx: list[int] | None = None, sidx: list[list[int]] | None = None
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {
        "x": rng.standard_normal((n, 4)).astype(np.float32),
        "sidx": np.array(sidx if sidx is not None else [[0, 1, 2, 3], [4, 5, 0, 1]], dtype=np.int64),
        "upd": rng.standard_normal((2, 4)).astype(np.float32),
        "gidx": np.array(gidx if gidx is not None else [5, 0, 2], dtype=np.int64),
    }


def _notes(session: dmlshim.InferenceSession, op: str) -> tuple[object, set[str]]:
    node = next(n for n in session.last_run_record.nodes if n.op_type == op)
    return node, {key for key, _ in node.notes}


def test_lean_check_only_after_the_proofs() -> None:
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = _check(session)
    feeds = _feeds()
    for run in range(1, PROVE_RUNS + 1):
        assert same_bits(session.run(None, feeds), reference.run(None, feeds))
        # on the proved runs every node is computed and compared in the full check: no lean session yet
        assert check.lean_runs == 0, run
        assert check._lean_session is None
        assert GIVEN not in _notes(session, "Gather")[1]
    session.run(None, feeds)  # run 4: both given in the full check, which then builds the lean one
    assert check.lean_runs == 0
    assert GIVEN in _notes(session, "Gather")[1] and GIVEN in _notes(session, "ScatterElements")[1]
    for run in range(5, 9):
        assert same_bits(session.run(None, feeds), reference.run(None, feeds)), run
        assert check.lean_runs == run - 4
        assert GIVEN in _notes(session, "Gather")[1] and GIVEN in _notes(session, "ScatterElements")[1]


@pytest.mark.parametrize("keep_full", [True, False])
def test_back_to_the_full_check_on_a_negative_index(keep_full: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not keep_full:  # one session at a time, as for heavy models
        monkeypatch.setattr(partitioned, "KEEP_FULL_MAX_BYTES", -1)
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = _check(session)
    for _ in range(5):
        assert same_bits(session.run(None, _feeds()), reference.run(None, _feeds()))
    assert check.lean_runs == 1
    assert (check._session is not None) is keep_full
    negative = _feeds(gidx=[5, -1, 2])
    assert same_bits(session.run(None, negative), reference.run(None, negative))
    assert check.lean_runs == 1  # run 6 answered by the full check
    node, notes = _notes(session, "Gather")
    assert node.negative_indices and GIVEN not in notes  # computed, as before the lean check
    assert check._session is not None
    for _ in range(3):
        assert same_bits(session.run(None, _feeds()), reference.run(None, _feeds()))
    # the heavy case stays on the full check once it came back; the light one goes lean again once a
    # full run has every node given (run 7: the shapes are the proved ones), so runs 8 and 9 are lean
    assert check.lean_runs == (3 if keep_full else 1)


def test_back_to_the_full_check_on_a_duplicate_scatter_index() -> None:
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = _check(session)
    for _ in range(5):
        session.run(None, _feeds())
    assert check.lean_runs == 1
    # the same place written twice: ONNX leaves the winner open, the check verifies the kernel's
    twice = _feeds(sidx=[[0, 1, 2, 3], [0, 5, 0, 1]])
    assert same_bits(session.run(None, twice), reference.run(None, twice))
    assert check.lean_runs == 1
    node, notes = _notes(session, "ScatterElements")
    assert node.duplicate_indices == 1 and GIVEN not in notes


def test_back_to_the_full_check_on_new_shapes() -> None:
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = _check(session)
    for _ in range(5):
        session.run(None, _feeds())
    assert check.lean_runs == 1
    wider = _feeds(n=9, gidx=[8, 0, 2, 7])
    for run in range(1, PROVE_RUNS + 1):  # new shapes: proved again in the full check
        assert same_bits(session.run(None, wider), reference.run(None, wider))
        assert check.lean_runs == 1, run
        assert GIVEN not in _notes(session, "Gather")[1]
    session.run(None, wider)
    session.run(None, wider)
    assert check.lean_runs == 2


def test_no_lean_check_under_full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_FULL_CHECK", "1")
    model = _model()
    reference = _ort(model)
    session = dmlshim.InferenceSession(model.SerializeToString())
    check = _check(session)
    for _ in range(8):
        assert same_bits(session.run(None, _feeds()), reference.run(None, _feeds()))
    # every run computes and compares every node: nothing is given, nothing goes lean
    assert check is None or check.lean_runs == 0
    assert GIVEN not in _notes(session, "Gather")[1]


def test_run_checked_never_answers_from_the_lean_check() -> None:
    model = _model()
    session = dmlshim.InferenceSession(model.SerializeToString())
    engine = session._engine
    for _ in range(5):
        session.run(None, _feeds())
    check = _check(session)
    assert check.lean_runs == 1
    # validate's reading: every emulated node's inputs and output in the value table
    outputs, _, values = engine.run_checked(["y"], _feeds())
    assert check.lean_runs == 1
    assert {"a", "s", "b", "g"} <= set(values)
    assert same_bits(outputs, _ort(model).run(None, _feeds()))
