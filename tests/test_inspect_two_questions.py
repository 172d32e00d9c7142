"""Issue 20: verdicts a user can act on.

inspect answers two questions separately (translation at the level; onnxruntime-directml's placement),
symbolic sizes never cause a fallback by themselves, ranks come from everything that fixes them, edge forms
are reported as onnxruntime treats them, and one failure kind is one exception class in every engine.

Expected placements come from the DirectML facts sheet (§5: ScatterND-18 has no DML-EP kernel; GatherND
always becomes GATHER_ND1 from FL 3_0) and expected values from onnxruntime's CPU provider.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from dmlshim.cli.main import main
from dmlshim.errors import DmlShimError, IndexOutOfRangeError, NotSupportedError
from dmlshim.execute.plan.sessions import ort_run_error
from dmlshim.model.ort_errors import ORT_ERRORS
from dmlshim.report.validate_report import render_text
from dmlshim.validate import validate_model
from tests.oracle import IR_VERSION, ort_run

PLACEHOLDER = re.compile(r"10{8}\d\d")  # inspect's placeholder sizes start at 1000000007


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opset: int = 13,
    extra: tuple[str, ...] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in extra)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["inspect", *argv])
    out, _ = capsys.readouterr()
    return code, out


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _scatternd18(tmp_path: Path) -> tuple[str, onnx.ModelProto]:
    model = _model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="kv_update")],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", T.INT64, [2, 1]),
            helper.make_tensor_value_info("u", T.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, [4, 3])],
        opset=18,
    )
    return _save(tmp_path, model), model


# --- 1. two questions ------------------------------------------------------------------------------------


def test_verdict_separates_translation_from_placement(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # ScatterND-18, reduction none: DirectML has SCATTER_ND, onnxruntime-directml registers no kernel for
    # opset 18 (facts §5), so it runs on the CPU. The verdict may not claim the node runs on DirectML.
    path, _ = _scatternd18(tmp_path)
    code, out = _inspect(capsys, path)
    assert code == 0  # the exit code answers the first question
    code, doc = _inspect(capsys, path, "--json")
    summary = json.loads(doc)["summary"]
    assert summary["all_dml"] is True and summary["all_on_dml_ep"] is False
    code, out = _inspect(capsys, path)
    assert "DirectML operators at DML_FEATURE_LEVEL_5_0: YES" in out
    assert (
        "onnxruntime-directml today: NO (0 of 1 on DmlExecutionProvider; 1 on CPUExecutionProvider: "
        "EP_NOT_REGISTERED 1)" in out
    )
    assert "runs as a DirectML operator" not in out
    assert "[placement] EP_NOT_REGISTERED" in out


def test_validate_table_reads_consistently(tmp_path: Path) -> None:
    path, model = _scatternd18(tmp_path)
    feeds = {
        "x": np.arange(12, dtype=np.float32).reshape(4, 3),
        "i": np.array([[3], [0]], dtype=np.int64),
        "u": np.full((2, 3), -1, dtype=np.float32),
    }
    report = validate_model(path, inputs=feeds)
    assert report.match
    np.testing.assert_array_equal(report.outputs[0].dmlshim, _reference(model, feeds)[0])
    text = render_text(report)
    row = next(line for line in text.splitlines() if line.strip().startswith("kv_update"))
    assert "emulated as DML_OPERATOR_SCATTER_ND" in row
    assert "place it on CPU (EP_NOT_REGISTERED)" in row
    assert "DML EP places on" not in text and "ran on  " not in text


# --- 2. symbolic sizes -----------------------------------------------------------------------------------


def _tf2onnx_gathernd(data_batch: str, indices_batch: str) -> onnx.ModelProto:
    # tf2onnx names the data's and the indices' batch dimension differently (unk__N for each input).
    return _model(
        [helper.make_node("GatherND", ["params", "idx"], ["out"], batch_dims=1, name="gather_nd")],
        [
            helper.make_tensor_value_info("params", T.FLOAT, [data_batch, 5, 4]),
            helper.make_tensor_value_info("idx", T.INT64, [indices_batch, 3, 1]),
        ],
        [helper.make_tensor_value_info("out", T.FLOAT, None)],
    )


@pytest.mark.parametrize("names", [("unk__11", "unk__12"), ("batch", "N")])
def test_differently_named_batch_symbols_never_fall_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, names: tuple[str, str]
) -> None:
    path = _save(tmp_path, _tf2onnx_gathernd(*names))
    operators = {}
    for level in ("2_1", "3_0", "5_0"):
        code, out = _inspect(capsys, path, "-l", level)
        assert code == 0, out
        assert f"DML_FEATURE_LEVEL_{level}: YES" in out and "BATCH_SIZES_MISMATCH" not in out
        assert not PLACEHOLDER.search(out), out
        code, doc_text = _inspect(capsys, path, "-l", level, "--json")
        assert code == 0 and not PLACEHOLDER.search(doc_text)
        node = json.loads(doc_text)["nodes"][0]
        assert node["status"] == "dml"
        operators[level] = node["operator"]["type"]
    # Facts §3/§5: no GATHER_ND1 before 3_0 (batch folded into the indices), GATHER_ND1 from 3_0 on.
    assert operators == {
        "2_1": "DML_OPERATOR_GATHER_ND",
        "3_0": "DML_OPERATOR_GATHER_ND1",
        "5_0": "DML_OPERATOR_GATHER_ND1",
    }


def test_batch_fold_note_names_symbols(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _save(tmp_path, _tf2onnx_gathernd("batch", "N"))
    code, out = _inspect(capsys, path, "-l", "2_1")
    assert code == 0
    note = next(line for line in out.splitlines() if "fold_batch_into_indices" in line)
    assert "batch dimensions [batch] flattened to batch" in note and "5*batch" in note
    assert not PLACEHOLDER.search(note)


def test_differently_named_batch_symbols_run_as_gather_nd1(tmp_path: Path) -> None:
    model = _tf2onnx_gathernd("unk__11", "unk__12")
    rng = np.random.default_rng(7)
    feeds = {
        "params": rng.standard_normal((2, 5, 4)).astype(np.float32),
        "idx": rng.integers(0, 5, size=(2, 3, 1)).astype(np.int64),
    }
    sess = dmlshim.InferenceSession(model.SerializeToString(), providers=["DmlExecutionProvider"])
    (got,) = sess.run(None, feeds)
    np.testing.assert_array_equal(got, _reference(model, feeds)[0])
    (record,) = sess.last_run_record.nodes
    assert record.placement == "dml" and record.operator == "DML_OPERATOR_GATHER_ND1"


def test_real_batch_mismatch_is_still_caught_when_the_node_runs(tmp_path: Path) -> None:
    # What the symbolic descriptor defers is checked with the real sizes: batch 2 against batch 3.
    model = _tf2onnx_gathernd("unk__11", "unk__12")
    feeds = {
        "params": np.zeros((2, 5, 4), np.float32),
        "idx": np.zeros((3, 3, 1), np.int64),
    }
    with pytest.raises(ORT_ERRORS):  # onnxruntime refuses these feeds as well
        _reference(model, feeds)
    sess = dmlshim.InferenceSession(model.SerializeToString(), providers=["DmlExecutionProvider"])
    with pytest.raises(DmlShimError):
        sess.run(None, feeds)


# --- 3. ranks --------------------------------------------------------------------------------------------


def test_empty_input_shape_declares_a_scalar(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="pick")],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", T.INT64, []),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
    )
    path = _save(tmp_path, model)
    for argv in ((), ("--input-shape", "i=")):
        code, out = _inspect(capsys, path, *argv, "--json")
        node = json.loads(out)["nodes"][0]
        assert code == 0 and node["status"] == "dml", out
        assert node["operator"]["desc"]["IndexDimensions"] == 0  # scalar indices (facts §5)


def _reshaped_indices(op: str) -> onnx.ModelProto:
    # The indices come from a Reshape whose shape tensor has a known length (2) but unknown values.
    node = (
        helper.make_node("Gather", ["x", "idx"], ["y"], axis=0, name="pick")
        if op == "Gather"
        else helper.make_node("GatherND", ["x", "idx"], ["y"], name="pick")
    )
    return _model(
        [helper.make_node("Reshape", ["flat", "shape"], ["idx"]), node],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [5, 4]),
            helper.make_tensor_value_info("flat", T.INT64, ["n"]),
            helper.make_tensor_value_info("shape", T.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
    )


def test_reshape_shape_length_gives_the_rank(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _save(tmp_path, _reshaped_indices("Gather"))
    code, out = _inspect(capsys, path, "--json")
    node = json.loads(out)["nodes"][0]
    assert code == 0 and node["status"] == "dml"
    assert node["operator"]["desc"]["IndexDimensions"] == 2  # rank 2 from the shape tensor's length


def test_next_suggests_only_flags_that_change_the_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # GatherND's output rank needs the value of the indices' last dim, which no --input-shape gives.
    path = _save(tmp_path, _reshaped_indices("GatherND"))
    code, out = _inspect(capsys, path)
    assert code == 1 and "SHAPE_UNKNOWN" in out
    assert out.splitlines()[-1] == f"Next: dmlshim validate {path} --feature-level 5_0"


def test_validate_json_takes_the_runs_status(tmp_path: Path) -> None:
    model = _reshaped_indices("GatherND")
    feeds = {
        "x": np.arange(20, dtype=np.float32).reshape(5, 4),
        "flat": np.array([4, 1, 0], dtype=np.int64),
        "shape": np.array([3, 1], dtype=np.int64),
    }
    report = validate_model(_save(tmp_path, model), inputs=feeds)
    assert report.match
    np.testing.assert_array_equal(report.outputs[0].dmlshim, _reference(model, feeds)[0])
    doc = report.to_json()
    (node,) = doc["nodes"]
    assert node["placement"] == "dml"
    assert node["status"] == "dml" and node["static_status"] == "error"


# --- 4. edge forms ---------------------------------------------------------------------------------------


def _zero_depth_scatternd() -> onnx.ModelProto:
    return _model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="replace_all")],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
            helper.make_tensor_value_info("i", T.INT64, [1, 0]),
            helper.make_tensor_value_info("u", T.FLOAT, [1, 2, 3]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )


def test_zero_depth_scatternd_is_a_cpu_fallback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = _zero_depth_scatternd()
    path = _save(tmp_path, model)
    code, out = _inspect(capsys, path, "--json")
    node = json.loads(out)["nodes"][0]
    assert code == 1
    assert node["status"] == "fallback" and node["ort_placement"] == "CPUExecutionProvider"
    codes = [r["code"] for r in node["reasons"]]
    assert "INDEX_TUPLE_EMPTY" in codes and "INDICES_SHAPE_INVALID" not in codes
    feeds = {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i": np.zeros((1, 0), np.int64),
        "u": np.full((1, 2, 3), 7, np.float32),
    }
    want = ort_run(model, feeds)[0]  # ONNX's reference where the installed onnxruntime crashes on it
    np.testing.assert_array_equal(want, np.full((2, 3), 7, np.float32))  # the update replaces it all
    for engine in ({}, {"engine": "customop"}):
        sess = dmlshim.InferenceSession(
            model.SerializeToString(), providers=["DmlExecutionProvider"], **engine
        )
        (got,) = sess.run(None, feeds)
        np.testing.assert_array_equal(got, want)


def test_other_domain_nodes_are_listed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("GatherND", ["x", "i"], ["y"], domain="com.microsoft", name="ms_gather_nd")],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", T.INT64, [3, 1]),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        extra=("com.microsoft",),
    )
    path = _save(tmp_path, model)
    code, out = _inspect(capsys, path)
    assert "1 node, 1 gather/scatter" in out and "ms_gather_nd" in out
    assert "DOMAIN_NOT_ONNX" in out and "1 on CPUExecutionProvider" in out
    code, out = _inspect(capsys, path, "--json")
    assert code == 1  # the node falls back
    (node,) = json.loads(out)["nodes"]
    assert node["domain"] == "com.microsoft" and node["ort_placement"] == "CPUExecutionProvider"


# --- 5. one class per failure kind -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", [{}, {"engine": "customop"}])
def test_out_of_range_on_a_fallback_node_is_index_out_of_range(engine: dict[str, str]) -> None:
    # String data: DirectML has no string type, so the node is left to onnxruntime in both engines.
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        [helper.make_tensor_value_info("x", T.STRING, [3]), helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("y", T.STRING, [2])],
    )
    feeds = {"x": np.array(["a", "b", "c"], dtype=object), "i": np.array([0, 5], np.int64)}
    with pytest.raises(ORT_ERRORS, match="out of"):
        _reference(model, feeds)
    sess = dmlshim.InferenceSession(model.SerializeToString(), providers=["DmlExecutionProvider"], **engine)
    with pytest.raises(IndexOutOfRangeError) as exc:
        sess.run(None, feeds)
    assert exc.value.op_type == "Gather" and exc.value.value == 5


def test_onnxruntime_not_implemented_is_not_a_bad_input() -> None:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    exc = state.NotImplemented(
        "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Non-zero status code returned while running "
        "ScatterElements node. Name:'s' Status Message: unsupported type"
    )
    err = ort_run_error(exc, "onnxruntime failed running the model")
    assert isinstance(err, NotSupportedError) and err.node == "s" and err.op_type == "ScatterElements"


# --- 6. --reference-outputs across dtypes ----------------------------------------------------------------


def test_reference_outputs_across_dtypes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Gather", ["labels", "i"], ["picked"], axis=0, name="pick")],
        [
            helper.make_tensor_value_info("labels", T.INT32, [4]),
            helper.make_tensor_value_info("i", T.INT64, [2]),
        ],
        [helper.make_tensor_value_info("picked", T.INT32, [2])],
    )
    path = _save(tmp_path, model)
    feeds = {"labels": np.array([10, 11, 12, 13], np.int32), "i": np.array([3, 1], np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    (want,) = _reference(model, feeds)
    np.savez(tmp_path / "ref64.npz", picked=want.astype(np.int64))  # the int64 labels PyTorch saves
    np.savez(tmp_path / "bad64.npz", picked=want.astype(np.int64) + 1)
    base = ["validate", path, "--inputs", str(tmp_path / "in.npz"), "--reference-outputs"]
    # Strict by default: a dtype difference is a mismatch whose message names the option.
    code = main([*base, str(tmp_path / "ref64.npz")])
    out = capsys.readouterr().out
    assert code == 1 and "dtype int32, the reference gives int64" in out and "--reference-any-dtype" in out
    code = main([*base, str(tmp_path / "ref64.npz"), "--reference-any-dtype"])
    assert code == 0, capsys.readouterr().out
    capsys.readouterr()
    code = main([*base, str(tmp_path / "bad64.npz"), "--reference-any-dtype", "--json"])
    doc = json.loads(capsys.readouterr().out)
    external = doc["outputs"][0]["reference_outputs"]
    assert code == 1 and external["mismatches"] == 2 and external["problem"] is None


def test_rule_messages_name_symbols() -> None:
    # A symbolic GATHER_ND1 whose second batch dimension is known to differ (5 against 3): the rule fails,
    # and its message and value show the symbol by name, never the placeholder.
    from dmlshim.dml.enums import DataType, FeatureLevel
    from dmlshim.dml.operators import GatherNd1Desc
    from dmlshim.dml.rule_checks import find_violations
    from dmlshim.dml.symbolic import SIZE_DEPENDENT_RULES, placeholder_shape
    from dmlshim.dml.tensor import BufferTensorDesc

    (b,) = placeholder_shape(("seq_a",), 0)
    (c,) = placeholder_shape(("seq_b",), 1)
    f32, i64 = DataType.FLOAT32, DataType.INT64
    desc = GatherNd1Desc(
        BufferTensorDesc(f32, (b, 5, 4)),
        BufferTensorDesc(i64, (c, 3, 1)),
        BufferTensorDesc(f32, (b, 3, 4)),
        3,
        3,
        2,
    )
    (v,) = [v for v in find_violations(desc, FeatureLevel.FL_5_0) if v.rule == "BATCH_SIZES_MISMATCH"]
    assert "['seq_b', 3]" in v.message and "['seq_a', 5]" in v.message
    assert v.value == ["seq_b", 3, 1] and not PLACEHOLDER.search(str(v))
    # With only the symbols differing in name, nothing fails.
    same = GatherNd1Desc(
        BufferTensorDesc(f32, (b, 5, 4)),
        BufferTensorDesc(i64, (c, 3, 1)),
        BufferTensorDesc(f32, (c, 3, 4)),
        3,
        3,
        1,
    )
    # (The size limits are left to the run, as the translator does for symbolic descriptors.)
    assert not [v for v in find_violations(same, FeatureLevel.FL_5_0) if v.rule not in SIZE_DEPENDENT_RULES]


def test_a_descriptor_the_provider_builds_wrong_makes_today_no(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A tester's finding: a strided-window GatherElements, which onnxruntime-directml places on DML with a
    # descriptor DirectML rejects (session creation fails, directml-facts.md), was answered "today: YES".
    g = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
        "strided",
        [helper.make_tensor_value_info("x", T.FLOAT, [3, 10]),
         helper.make_tensor_value_info("i", T.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 4])],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    code, out = _inspect(capsys, _save(tmp_path, model))
    assert code == 0  # the first question (it translates) decides the exit code
    assert "DirectML operators at DML_FEATURE_LEVEL_5_0: YES" in out
    assert "onnxruntime-directml today: NO (" in out and "EP_DESCRIPTOR_FAILS" in out
