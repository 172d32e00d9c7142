"""A new user's look at what issue 35's round 55 landed, for false positives: runs dmlshim refused,
warned about or mis-reported although onnxruntime runs them (and real DirectML does, for its notes).

``EP_FAILS_OUTPUT_CONTRADICTING_DECLARED_SHAPE`` was noted on graph outputs real DirectML runs: those of
If, Loop and Scan (control flow, run by onnxruntime outside the provider's kernels), of ops the provider
has no kernel for (Unique, Compress, NonMaxSuppression, the window ops and MelWeightMatrix: on CPU) and
string outputs (no DirectML form). Each was measured with ``dmlshim directml sweep`` (DirectML 1.15.4,
onnxruntime-directml 1.24): every one ran, bit-equal to onnxruntime CPU. Expected values come from
onnxruntime CPU; the real DirectML check is skipped without the stack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.translate.ep_declared_shapes import EP_DECLARED_SHAPE_REFUSAL
from dmlshim.validate import validate_model
from tests.directml_sweeps import sweep_built
from tests.oracle import IR_VERSION, ort_run

CODE = EP_DECLARED_SHAPE_REFUSAL.code
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           opset: int = 18) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(nodes, "newuser55", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _if() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = _model([node], [vi("c", B, []), vi("x", F, ["n", 2])], [vi("y", F, [1, 2])])
    return model, {"c": np.array(True), "x": np.array([[1, -2], [3, -4], [-5, 6]], np.float32)}


def _loop() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]), helper.make_node("Relu", ["x"], ["s"])], "body",
        [vi("i", I64, []), vi("cin", B, [])], [vi("cout", B, []), vi("s", F, None)],
    )  # fmt: skip
    node = helper.make_node("Loop", ["n", ""], ["y"], body=body)
    model = _model([node], [vi("n", I64, []), vi("x", F, [2])], [vi("y", F, [1, 2])])
    return model, {"n": np.array(3, np.int64), "x": np.array([1, -2], np.float32)}


def _scan() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    body = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])], "body", [vi("a", F, [2])], [vi("b", F, [2])]
    )
    node = helper.make_node("Scan", ["x"], ["y"], body=body, num_scan_inputs=1)
    model = _model([node], [vi("x", F, ["n", 2])], [vi("y", F, [1, 2])])
    return model, {"x": np.array([[1, -2], [3, -4], [-5, 6]], np.float32)}


def _one(op: str, inputs: list[onnx.ValueInfoProto], feeds: dict[str, np.ndarray], out_type: int = F,
         **attrs: object) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:  # fmt: skip
    node = helper.make_node(op, [v.name for v in inputs], ["y"], **attrs)
    return _model([node], inputs, [vi("y", out_type, [1])]), feeds


X5 = np.array([3, 1, 2, 3, 5], np.float32)
CASES = {
    "if": _if,
    "loop": _loop,
    "scan": _scan,
    "unique": lambda: _one("Unique", [vi("x", F, ["n"])], {"x": X5}, sorted=1),
    "compress": lambda: _one(
        "Compress",
        [vi("x", F, ["n"]), vi("c", B, ["n"])],
        {"x": X5, "c": np.array([1, 0, 1, 1, 0], bool)},
        axis=0,
    ),
    "hann": lambda: _one("HannWindow", [vi("n", I64, [])], {"n": np.array(3, np.int64)}),
    "blackman": lambda: _one("BlackmanWindow", [vi("n", I64, [])], {"n": np.array(3, np.int64)}),
    "string_identity": lambda: _one(
        "Identity",
        [vi("x", TensorProto.STRING, ["n"])],
        {"x": np.array(["a", "b", "c"], object)},
        TensorProto.STRING,
    ),
}
"""Each form real DirectML runs although the run contradicts the declared output ([1] or [1, 2])."""


@pytest.mark.parametrize("form", list(CASES))
def test_no_note_where_directml_runs_the_output(form: str) -> None:
    model, feeds = CASES[form]()
    expected = ort_run(model, feeds, quiet=True)
    assert expected[0].shape[0] > 1  # onnxruntime CPU runs it: the declaration is contradicted
    session = InferenceSession(model.SerializeToString())
    got = session.run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])
    assert session.last_run_record is not None
    assert [code for code, _ in session.last_run_record.notes if code == CODE] == []


def test_validate_does_not_warn_on_a_loop_output(tmp_path: Path) -> None:
    model, feeds = _loop()
    path = tmp_path / "loop.onnx"
    onnx.save(model, str(path))
    report = validate_model(str(path), inputs=feeds)
    assert "ORT_DML_EP_FAILS_THIS_RUN" not in [w.code for w in report.warnings]
    assert report.match


def test_a_relu_declared_scalar_fed_one_element_is_still_noted() -> None:
    # measured: real DirectML fails this run (MLOperatorAuthorImpl.cpp(2844)), onnxruntime CPU runs it
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, None)], [vi("y", F, [])])
    feeds = {"x": np.array([-1.5], np.float32)}
    expected = ort_run(model, feeds, quiet=True)
    session = InferenceSession(model.SerializeToString())
    np.testing.assert_array_equal(session.run(None, feeds)[0], expected[0])
    assert session.last_run_record is not None
    assert [code for code, _ in session.last_run_record.notes] == [CODE]


@real
@pytest.mark.parametrize("form", ["if", "unique"])
def test_real_directml_runs_these_outputs(form: str, tmp_path: Path) -> None:
    model, feeds = CASES[form]()
    result = sweep_built(model, feeds, tmp_path, form)
    assert result.outcome == "ran", result.message
    assert CODE not in result.predicted_refusal


def test_outputs_declared_partly_static_run_as_onnxruntime_runs_them() -> None:
    # two outputs declared [n, 2] (a static size past the first axis): the check of each run's outputs
    # reused the output index for the axis and raised IndexError on every run (torch's legacy export of
    # ``x.repeat(4, 1)[torch.arange(x.shape[0] * 4)]`` declares its outputs so)
    x = np.array([[1, -2], [3, -4], [-5, 6]], np.float32)
    model = _model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
        [vi("x", F, ["n", 2])], [vi("a", F, ["n", 2]), vi("b", F, ["n", 2])],
    )  # fmt: skip
    expected = ort_run(model, {"x": x})
    session = InferenceSession(model.SerializeToString())
    got = session.run(None, {"x": x})
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    assert session.last_run_record is not None and session.last_run_record.notes == ()


def test_a_contradicted_second_output_after_a_partly_static_first_is_noted() -> None:
    # real DirectML fails a Relu output declared [1, 2] over x: [n, 2] fed [3, 2]
    # (tests/test_ep_declared_output55.py)
    x = np.array([[1, -2], [3, -4], [-5, 6]], np.float32)
    model = _model(
        [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"])],
        [vi("x", F, ["n", 2])], [vi("a", F, ["n", 2]), vi("b", F, [1, 2])],
    )  # fmt: skip
    expected = ort_run(model, {"x": x}, quiet=True)
    session = InferenceSession(model.SerializeToString())
    got = session.run(None, {"x": x})
    np.testing.assert_array_equal(got[1], expected[1])
    assert session.last_run_record is not None
    notes = [m for code, m in session.last_run_record.notes if code == CODE]
    assert len(notes) == 1 and "graph output 'b'" in notes[0] and "[3, 2]" in notes[0]


@pytest.mark.parametrize("engine", ["customop", "partitioned", "cpu"])
def test_a_stale_static_value_info_on_gathered_indices_runs_as_onnxruntime(engine: str) -> None:
    # indices made by Expand(k, s) with s fed [4], the model declaring them [10**8] (stale): onnxruntime runs
    # it; the custom-op engine's numpy guard Reshape'd to the folded declaration and refused the run
    model = _model(
        [helper.make_node("Expand", ["k", "s"], ["e"]), helper.make_node("Gather", ["t", "e"], ["y"])],
        [vi("k", I64, [1]), vi("s", I64, [1]), vi("t", F, ["a", "b"])], [vi("y", F, None)],
    )  # fmt: skip
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model.graph.value_info.extend([vi("e", I64, [10**8])])
    feeds = {
        "k": np.array([1], np.int64),
        "s": np.array([4], np.int64),
        "t": np.arange(30, dtype=np.float32).reshape(3, 10),
    }
    expected = ort_run(model, feeds, quiet=True)
    got = InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])
