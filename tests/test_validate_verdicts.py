"""``dmlshim validate``'s verdict (issue 11 items 1, 2 and 8): like-for-like reference, attribution, and
partition boundaries that declare only what is certain.

Every model here is small and built in the test. Expected values come from onnxruntime CPU, run by the
test itself (tests/oracle.py sessions, or sessions with an explicit graph optimisation level); planted
faults go through the kernel registry, as in test_validate_cmd.py, so onnxruntime stays untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.comparison import dtype_tolerance, exact_difference
from dmlshim.dml.enums import FeatureLevel
from dmlshim.dml.operators import GatherDesc, ScatterNdDesc
from dmlshim.errors import BadInputError
from dmlshim.execute.engine import EngineConfig
from dmlshim.execute.engines.partitioned import PartitionedEngine
from dmlshim.execute.plan.segments import boundary_types, proven_types, type_protos
from dmlshim.kernels import _KERNELS, KernelOptions, KernelResult
from dmlshim.validate import OPTIMIZATION_LEVELS, compare_arrays, validate_model
from tests.oracle import IR_VERSION, ort_node, ort_run

# Faults are planted in the numpy kernels' table (dmlshim.kernels._KERNELS).
pytestmark = pytest.mark.usefixtures("numpy_kernels")

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: Mapping[str, np.ndarray] = {},
    value_info: list[onnx.ValueInfoProto] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "verdicts",
        inputs,
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
        value_info=value_info or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], level: str) -> list[np.ndarray]:
    """onnxruntime CPU on the whole model at a given graph optimisation level, single-threaded."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = OPTIMIZATION_LEVELS[level]
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(session.run(None, dict(feeds)))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["validate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _plant(monkeypatch: pytest.MonkeyPatch, desc_type: type) -> None:
    """The DirectML kernel for desc_type answers as if it read one element off (output rolled by one)."""
    real = _KERNELS[desc_type]

    def faulty(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        shifted = np.roll(result.output.reshape(-1), 1).reshape(result.output.shape)
        return KernelResult(np.ascontiguousarray(shifted), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, desc_type, faulty)


# --- item 1: fusion across a gather is information, not a mismatch ----------------------------------------

RNG = np.random.default_rng(11)
S, H = 8, 32


def _layer_norm_with_gathered_scale() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A decomposed LayerNorm whose scale is gathered from a table by a constant index. onnxruntime folds
    the gather and fuses LayerNormalization when it sees the whole model; in a partition the gathered
    scale arrives as a segment input, so the decomposed form is computed instead."""
    inits = {
        "table": RNG.standard_normal((10, H)).astype(np.float32),  # > 100 elements: not a CPU-side gather
        "row": np.array(4, np.int64),
        "beta": RNG.standard_normal(H).astype(np.float32),
        "eps": np.array(1e-5, np.float32),
        "two": np.array(2.0, np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["table", "row"], ["gamma"], name="scale_gather", axis=0),
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["ng"]),
        helper.make_node("Add", ["ng", "beta"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F32, [S, H])],
        [helper.make_tensor_value_info("y", F32, [S, H])],
        inits,
    )
    return model, {"x": (RNG.standard_normal((S, H)) * 3 + 1).astype(np.float32)}


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_fusion_across_a_gather_is_not_a_mismatch(level: str) -> None:
    model, feeds = _layer_norm_with_gathered_scale()
    report = validate_model(model, inputs=feeds, optimization_level=level)
    assert report.match and report.exit_code == 0
    assert dict(report.optimization_levels) == {"dmlshim": level, "reference": level, "whole_model": level}
    (out,) = report.outputs
    (node,) = report.nodes
    assert node.placement == "dml" and node.attribution == "match"
    # Without optimisation the partitions compute the whole model's bits (onnxruntime's own answer).
    (unoptimised,) = _ort(model, feeds, "disabled")
    assert out.dmlshim is not None and out.reference is not None
    assert exact_difference(out.dmlshim, unoptimised).first is None
    assert exact_difference(out.reference, unoptimised).first is None
    whole = out.whole_model
    assert whole is not None and whole.onnxruntime is not None
    (optimised,) = _ort(model, feeds, level)
    assert exact_difference(whole.onnxruntime, optimised).first is None
    if level == "disabled":
        assert whole.identical and whole.cause == "identical"
    else:
        # onnxruntime's fusion changes the last bits (independently of dmlshim) ...
        assert exact_difference(optimised, unoptimised).first is not None
        # ... which the report puts on the non-gather/scatter nodes, within float32's tolerance.
        assert not whole.identical and whole.cause == "other_nodes" and whole.within_tolerance
        assert (whole.rtol, whole.atol) == dtype_tolerance(np.dtype(np.float32))
        assert 0 < (whole.max_abs_diff or 0) < 1e-5


def test_fusion_case_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, feeds = _layer_norm_with_gathered_scale()
    onnx.save(model, tmp_path / "ln.onnx")
    np.savez(tmp_path / "ln.npz", **feeds)
    code, out, _ = _cli(
        capsys, str(tmp_path / "ln.onnx"), "--inputs", str(tmp_path / "ln.npz"), "--optimization-level", "all"
    )
    assert code == 0, out
    assert "onnxruntime graph optimization: dmlshim all, reference all, whole_model all" in out
    assert "comparison: exact (bit for bit; any NaN equals any NaN)" in out
    assert "non-gather/scatter nodes only (fusion, partition boundaries)" in out
    assert "verdict: MATCH" in out


def test_fp16_partition_boundary_rounding_is_not_a_mismatch() -> None:
    """fp16 Mul and Add run in fp32 inside onnxruntime; seen whole, the cast pair between them is dropped,
    while the partition boundary (the Add waits for the emulated Gather) rounds the product to fp16."""
    inits = {"table": RNG.standard_normal((10, 48)).astype(np.float16), "c": np.array(1.37, np.float16)}
    nodes = [
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Gather", ["table", "idx"], ["bias"], name="bias_gather", axis=0),
        helper.make_node("Add", ["m", "bias"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F16, [16, 48]), helper.make_tensor_value_info("idx", I64, [])],
        [helper.make_tensor_value_info("y", F16, [16, 48])],
        inits,
    )
    feeds = {"x": RNG.standard_normal((16, 48)).astype(np.float16), "idx": np.array(3, np.int64)}
    report = validate_model(model, inputs=feeds)
    assert report.match
    (out,) = report.outputs
    # What the partitions compute, node by node in onnxruntime: the product rounded to fp16 at the cut.
    mul = _model(
        [nodes[0]],
        [helper.make_tensor_value_info("x", F16, [16, 48])],
        [onnx.ValueInfoProto(name="m")],
        inits,
    )
    (product,) = ort_run(mul, {"x": feeds["x"]})
    bias = ort_node("Gather", {"data": inits["table"], "indices": feeds["idx"]}, {"axis": 0})
    expected = ort_node("Add", {"a": product, "b": bias})
    assert out.dmlshim is not None and exact_difference(out.dmlshim, expected).first is None
    whole = out.whole_model
    assert whole is not None and whole.onnxruntime is not None
    (whole_ort,) = ort_run(model, feeds)
    assert exact_difference(whole.onnxruntime, whole_ort).first is None
    assert exact_difference(whole_ort, expected).first is not None  # the cast pair really was dropped
    assert whole.cause == "other_nodes" and whole.within_tolerance
    assert (whole.rtol, whole.atol) == (1e-2, 1e-2)


# --- item 2: attribution ---------------------------------------------------------------------------------


def _gather_into_scatter() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """updates = 2 * Gather(table, rows); out = ScatterND(data, where, updates)."""
    inits = {"table": RNG.standard_normal((30, 4)).astype(np.float32), "two": np.array(2.0, np.float32)}
    nodes = [
        helper.make_node("Gather", ["table", "rows"], ["picked"], name="pick_rows", axis=0),
        helper.make_node("Mul", ["picked", "two"], ["updates"], name="double"),
        helper.make_node("ScatterND", ["data", "where", "updates"], ["out"], name="write_rows"),
    ]
    model = _model(
        nodes,
        [
            helper.make_tensor_value_info("data", F32, [8, 4]),
            helper.make_tensor_value_info("rows", I64, [3]),
            helper.make_tensor_value_info("where", I64, [3, 1]),
        ],
        [helper.make_tensor_value_info("out", F32, [8, 4])],
        inits,
    )
    feeds = {
        "data": RNG.standard_normal((8, 4)).astype(np.float32),
        "rows": np.array([5, 0, 17], np.int64),
        "where": np.array([[6], [1], [3]], np.int64),
    }
    return model, feeds


def test_correct_model_attribution_is_all_match() -> None:
    model, feeds = _gather_into_scatter()
    report = validate_model(model, inputs=feeds)
    assert report.match
    assert {n.name: (n.placement, n.attribution) for n in report.nodes} == {
        "pick_rows": ("dml", "match"),
        "write_rows": ("dml", "match"),
    }
    (expected,) = ort_run(model, feeds)
    (out,) = report.outputs
    assert out.dmlshim is not None and exact_difference(out.dmlshim, expected).first is None


def test_scatter_whose_updates_already_differed_is_not_blamed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, feeds = _gather_into_scatter()
    _plant(monkeypatch, GatherDesc)
    report = validate_model(model, inputs=feeds)
    assert not report.match and report.exit_code == 1
    nodes = {n.name: n for n in report.nodes}
    gather, scatter = nodes["pick_rows"], nodes["write_rows"]
    assert gather.attribution == "diverges_here"
    assert gather.inputs_match is True and gather.output_match is False
    assert scatter.attribution == "inputs_differed"
    assert dict(scatter.input_matches) == {"data": True, "where": True, "updates": False}
    (out,) = report.mismatched
    assert out.upstream_nodes == ("pick_rows", "write_rows") and out.suspect_nodes == ("pick_rows",)
    # The reference is onnxruntime's answer for this model (fp32, no optimisation: bit for bit).
    (expected,) = ort_run(model, feeds)
    assert out.reference is not None and exact_difference(out.reference, expected).first is None
    # The whole-model comparison puts the difference on a gather/scatter node too.
    assert out.whole_model is not None and out.whole_model.cause == "gather_scatter"
    codes = {(w.code, w.node) for w in report.warnings}
    assert ("NODE_OUTPUT_DIFFERS", "pick_rows") in codes
    assert ("NODE_INPUTS_DIFFER", "write_rows") in codes
    assert ("NODE_OUTPUT_DIFFERS", "write_rows") not in codes

    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", **feeds)
    code, text, _ = _cli(capsys, str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "m.npz"))
    assert code == 1
    assert "divergence starts at: pick_rows" in text
    assert "inputs already differed (upstream): write_rows" in text
    code, out_json, _ = _cli(capsys, str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "m.npz"), "--json")
    doc = json.loads(out_json)
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert by_name["write_rows"]["attribution"] == "inputs_differed"
    assert {i["name"]: i["match"] for i in by_name["write_rows"]["inputs"]} == {
        "data": True,
        "where": True,
        "updates": False,
    }
    assert doc["outputs"][0]["suspect_nodes"] == ["pick_rows"]


def test_fault_in_the_scatter_itself_is_blamed_on_the_scatter(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _gather_into_scatter()
    _plant(monkeypatch, ScatterNdDesc)
    report = validate_model(model, inputs=feeds)
    assert not report.match
    nodes = {n.name: n.attribution for n in report.nodes}
    assert nodes == {"pick_rows": "match", "write_rows": "diverges_here"}
    assert report.outputs[0].suspect_nodes == ("write_rows",)


def test_exact_comparison_sees_a_sign_of_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy keeps -0.0; a kernel that turns it into +0.0 is caught by the default (exact) comparison and
    passes with a tolerance, where -0.0 == 0.0."""
    model, feeds = _gather_into_scatter()
    table = np.full((30, 4), -0.0, np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(table, "table"))
    real = _KERNELS[GatherDesc]

    def positive_zero(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        return KernelResult(np.abs(result.output), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, GatherDesc, positive_zero)
    exact = validate_model(model, inputs=feeds)
    assert not exact.match and exact.exact
    assert {n.name: n.attribution for n in exact.nodes}["pick_rows"] == "diverges_here"
    assert validate_model(model, inputs=feeds, atol=1e-30).match


def test_compare_arrays_exact_rules() -> None:
    nan_a = np.array([np.nan], np.float32)
    nan_b = np.array([0x7FC00001], np.uint32).view(np.float32)  # another NaN payload
    assert compare_arrays(nan_a, nan_b, exact=True).match
    assert compare_arrays(-nan_a, nan_a, exact=True).match
    zeros = compare_arrays(np.array([0.0], np.float16), np.array([-0.0], np.float16), exact=True)
    assert not zeros.match and zeros.mismatches == 1 and zeros.first_mismatch is not None
    assert compare_arrays(np.array([0.0], np.float16), np.array([-0.0], np.float16)).match
    assert not compare_arrays(np.array([1, 2]), np.array([1, 3]), exact=True).match
    assert dtype_tolerance(np.dtype(np.int64)) == (0.0, 0.0)
    assert dtype_tolerance(np.dtype(np.float16)) == (1e-2, 1e-2)


# --- item 8: stale value_info at a partition boundary ----------------------------------------------------


def _stale_rank_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The Gather's indices come from a Squeeze with runtime axes, so shape inference cannot derive the
    Gather output's rank; the exporter's value_info declares rank 3 where the real output has rank 2."""
    nodes = [
        helper.make_node("Squeeze", ["idx", "axes"], ["rows"]),
        helper.make_node("Gather", ["data", "rows"], ["g"], name="stale_gather", axis=0),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    model = _model(
        nodes,
        [
            helper.make_tensor_value_info("data", F32, [5, 4]),
            helper.make_tensor_value_info("idx", I64, [1, 3]),
            helper.make_tensor_value_info("axes", I64, [1]),
        ],
        [helper.make_tensor_value_info("y", F32, None)],
        value_info=[helper.make_tensor_value_info("g", F32, [3, 4, 1])],
        opset=13,
    )
    feeds = {
        "data": (np.arange(20, dtype=np.float32).reshape(5, 4) - 7),
        "idx": np.array([[0, 2, 4]], np.int64),
        "axes": np.array([0], np.int64),
    }
    return model, feeds


def test_stale_value_info_rank_runs_and_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, feeds = _stale_rank_model()
    (expected,) = ort_run(model, feeds)  # onnxruntime alone runs it
    assert expected.shape == (3, 4)
    onnx.save(model, tmp_path / "stale.onnx")
    np.savez(tmp_path / "stale.npz", **feeds)
    code, out, err = _cli(
        capsys, str(tmp_path / "stale.onnx"), "--inputs", str(tmp_path / "stale.npz"), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["match"] is True
    (node,) = doc["nodes"]
    assert node["placement"] == "dml"
    assert [n["code"] for n in node["run"]["notes"]] == ["output_shape_differs_from_inference"]
    assert "[3, 4]" in node["run"]["notes"][0]["message"] and "[3,4,1]" in node["run"]["notes"][0]["message"]
    assert "OUTPUT_SHAPE_DIFFERS_FROM_INFERENCE" in {w["code"] for w in doc["warnings"]}
    # The engine itself (partitions walked, no whole-model shortcut) gives onnxruntime's answer.
    engine = PartitionedEngine(model, EngineConfig(FeatureLevel.FL_5_0, whole_model_check=False))
    (got,), record = engine.run(["y"], feeds)
    assert exact_difference(got, expected).first is None
    assert engine.cpu_partitions == 2 and engine.emulated_nodes == ("stale_gather",)
    assert record.nodes[0].notes and record.nodes[0].notes[0][0] == "output_shape_differs_from_inference"


def test_segment_inputs_keep_proven_shapes() -> None:
    """A shape derived from the graph inputs alone is still declared (onnxruntime can plan with it)."""
    model, _ = _gather_into_scatter()
    proven = proven_types(model)
    types = boundary_types({"picked", "data"}, model.graph, type_protos(model.graph), proven)
    dims = [d.dim_value for d in types["picked"].tensor_type.shape.dim]
    assert dims == [3, 4] and types["picked"].tensor_type.elem_type == F32
    assert types["data"] == model.graph.input[0].type
    stale, _ = _stale_rank_model()
    types = boundary_types({"g"}, stale.graph, type_protos(stale.graph), proven_types(stale))
    assert types["g"].tensor_type.elem_type == F32 and not types["g"].tensor_type.HasField("shape")


# --- the option ------------------------------------------------------------------------------------------


def test_optimization_level_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, feeds = _gather_into_scatter()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", **feeds)
    args = [str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "m.npz"), "--json"]
    code, out, _ = _cli(capsys, *args, "--optimization-level", "extended")
    assert code == 0
    assert set(json.loads(out)["optimization_levels"].values()) == {"extended"}
    code, out, _ = _cli(capsys, *args)
    assert set(json.loads(out)["optimization_levels"].values()) == {"disabled"}
    with pytest.raises(SystemExit) as exc:
        main(["validate", *args, "--optimization-level", "everything"])
    assert exc.value.code == 2
    capsys.readouterr()
    with pytest.raises(BadInputError, match="optimization level"):
        validate_model(model, inputs=feeds, optimization_level="everything")


def test_segment_rebuilt_when_a_derived_shape_is_wrong(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should shape inference ever derive a wrong shape for a boundary value, the segment that declares it
    is rebuilt with element types only and the run goes on (onnxruntime alone runs the model)."""
    import dmlshim.execute.plan.segments as segments

    model, feeds = _stale_rank_model()
    real = segments.proven_types

    def wrong(m: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
        found = dict(real(m))
        found["g"] = helper.make_tensor_type_proto(F32, [3, 4, 1])
        return found

    monkeypatch.setattr(segments, "proven_types", wrong)
    (expected,) = ort_run(model, feeds)
    engine = PartitionedEngine(model, EngineConfig(FeatureLevel.FL_5_0, whole_model_check=False))
    with caplog.at_level("WARNING", logger="dmlshim.execute.plan.steps"):
        (got,), _ = engine.run(["y"], feeds)
        (again,), _ = engine.run(["y"], feeds)
    assert exact_difference(got, expected).first is None
    assert exact_difference(again, expected).first is None
    rebuilt = [
        r for r in caplog.records if "rebuilt with inputs that declare element types only" in r.message
    ]
    assert len(rebuilt) == 1 and "Invalid rank for input: g" in rebuilt[0].getMessage()


def test_model_onnxruntime_cannot_load_whole_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The partitions would run it (their outputs declare no type), but onnxruntime refuses the model
    itself: the declared output type contradicts what the graph computes."""
    nodes = [
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("idx", I64, [2])],
        [helper.make_tensor_value_info("y", I64, [2, 60])],
        {"table": np.arange(600, dtype=np.float32).reshape(10, 60)},
        opset=13,
    )
    with pytest.raises(Exception, match="Type Error"):
        ort_run(model, {"idx": np.array([1, 3], np.int64)})
    onnx.save(model, tmp_path / "typed.onnx")
    np.savez(tmp_path / "typed.npz", idx=np.array([1, 3], np.int64))
    code, out, err = _cli(capsys, str(tmp_path / "typed.onnx"), "--inputs", str(tmp_path / "typed.npz"))
    assert code == 2 and out == ""
    assert "onnxruntime cannot load the model" in err and "Traceback" not in err
