"""One placement model: inspect, run and validate give every gather/scatter node the same ort_placement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.ort.session import InferenceSession
from dmlshim.translate import load_model, translate_model
from dmlshim.translate.placement import provider_notes
from dmlshim.validate import validate_model
from tests.oracle import IR_VERSION

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted(ROOT.glob("*.onnx")) + sorted((ROOT / "real").glob("*.onnx"))


def shape_chain_model() -> onnx.ModelProto:
    """A legacy-exporter pattern: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` beside a real
    embedding Gather. onnxruntime runs the first Gather on the CPU (all its inputs are CPU tensors)."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),  # unnamed: Gather_0
        helper.make_node("Shape", ["emb"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0, name="batch_dim"),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="unsq"),
        helper.make_node("Concat", ["batch1", "minus1"], ["new_shape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["emb", "new_shape"], ["flat"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_chain",
        [helper.make_tensor_value_info("ids", T.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("flat", T.FLOAT, None)],
        initializer=[
            numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table"),
            numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
            numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def _three_ways(path: Path, feeds: dict[str, np.ndarray]) -> tuple[dict, dict, dict]:
    inspected = {n.name: n.ort_placement for n in translate_model(load_model(path)).nodes}
    session = InferenceSession(str(path))
    session.run(None, feeds)
    record = session.last_run_record
    assert record is not None
    ran = {r.name: r.ort_placement for r in record.nodes}
    validated = {n.name: n.ort_placement for n in validate_model(str(path), inputs=feeds).nodes}
    return inspected, ran, validated


def test_shape_computation_gather_is_on_cpu_in_inspect_run_and_validate(tmp_path: Path) -> None:
    path = tmp_path / "chain.onnx"
    onnx.save(shape_chain_model(), path)
    feeds = {"ids": np.array([[1, 2, 3], [4, 5, 9]], dtype=np.int64)}
    inspected, ran, validated = _three_ways(path, feeds)
    assert inspected == ran == validated
    assert inspected == {"Gather_0": "DmlExecutionProvider", "batch_dim": "CPUExecutionProvider"}
    codes = {n.name: n.reason_codes for n in translate_model(load_model(path)).nodes}
    assert "EP_CPU_PREFERRED" in codes["batch_dim"]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_placement_agrees_on_shipped_models(path: Path) -> None:
    npz = path.with_suffix(".npz")
    if not npz.is_file():
        pytest.skip(f"{path.name} ships no inputs")
    with np.load(npz) as data:
        feeds = {k: data[k] for k in data.files}
    inspected, ran, validated = _three_ways(path, feeds)
    assert set(inspected) == set(ran) == set(validated)
    for name in inspected:
        assert inspected[name] == ran[name] == validated[name], name


def test_empty_indices_scatter_nd_warns_that_the_provider_leaves_output_unwritten() -> None:
    # facts §5: no DML operator for an empty tensor; ExecuteOperator returns without writing the output.
    notes = provider_notes("ScatterND", (), {"data": (4, 3), "indices": (0, 1)})
    assert [r.code for r in notes] == ["EP_OUTPUT_UNWRITTEN"]
    assert provider_notes("ScatterND", (), {"data": (4, 3), "indices": (2, 1)}) == ()


def test_strided_window_says_the_providers_descriptor_fails(tmp_path: Path) -> None:
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0, name="ge")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 2])],
        initializer=[numpy_helper.from_array(np.array([[0, 1], [2, 0]], dtype=np.int64), "i")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    (t,) = translate_model(model).nodes
    assert t.ort_placement == "DmlExecutionProvider"
    assert "EP_DESCRIPTOR_FAILS" in t.reason_codes


def test_unnamed_nodes_are_named_as_onnxruntime_names_them(tmp_path: Path) -> None:
    # onnxruntime's profiler names an unnamed node <OpType>_<position in the graph>: the same name in
    # inspect, in the run record and in validate.
    import json

    import onnxruntime as ort

    path = tmp_path / "chain.onnx"
    onnx.save(shape_chain_model(), path)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {"ids": np.array([[1, 2]], dtype=np.int64)}
    session.run(None, feeds)
    with open(session.end_profiling()) as handle:
        events = json.load(handle)
    profiled = {e["name"].removesuffix("_kernel_time") for e in events if e.get("cat") == "Node"}
    inspected, ran, validated = _three_ways(path, feeds)
    assert "Gather_0" in profiled and set(inspected) == set(ran) == set(validated) <= profiled


def test_weight_read_at_a_shape_derived_index_stays_on_dml(tmp_path: Path) -> None:
    # A large initializer is neither a CPU tensor nor a graph input: the Gather reading it stays on the
    # DirectML provider although its index comes from Shape.
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0, name="batch_dim"),
        helper.make_node("Gather", ["table", "batch"], ["row"], axis=0, name="table_row"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("row", T.FLOAT, [100])],
        initializer=[
            numpy_helper.from_array(np.zeros((300, 100), dtype=np.float32), "table"),
            numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        ],
    )
    path = tmp_path / "weight.onnx"
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION), path
    )
    inspected, ran, validated = _three_ways(path, {"x": np.zeros((4, 3), dtype=np.float32)})
    assert inspected == ran == validated
    assert inspected == {"batch_dim": "CPUExecutionProvider", "table_row": "DmlExecutionProvider"}
