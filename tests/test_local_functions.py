"""Model-local functions are expanded as onnxruntime expands them, before anything else: every gather/scatter
node in a function body (nested functions, a function called twice with different shapes, an If inside a
function) is translated, run, exported and named as onnxruntime names it.

Expected names come from onnxruntime itself: the graph it writes (``optimized_model_filepath`` with
optimizations off, i.e. the inlined graph) and the node names in its profile.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.graph import is_gather_scatter, walk_nodes
from tests import acceptance_models as am
from tests.fuzz_settings import run_cli
from tests.oracle import IR_VERSION, ort_run

ENGINES = ["partitioned"]
if importlib.util.find_spec("onnxruntime_extensions") is not None:
    ENGINES.append("customop")


def _bits(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == e.tobytes()


def _ort_inlined(model: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    """The graph onnxruntime runs: it writes its inlined model when asked, with optimizations off."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "ort_inlined.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


def _ort_gather_scatter_names(model: onnx.ModelProto, tmp_path: Path) -> list[str]:
    inlined = _ort_inlined(model, tmp_path)
    return sorted(name for name, node in walk_nodes(inlined.graph) if is_gather_scatter(node))


def _ort_profile_names(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path) -> set[str]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ort_profile")
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    suffix = "_kernel_time"
    return {
        e["name"][: -len(suffix)] for e in events if e.get("cat") == "Node" and e["name"].endswith(suffix)
    }


def _inspect_names(path: Path) -> list[str]:
    r = run_cli("inspect", path, "--json")
    assert r.code == 0, r.err
    return sorted(n["name"] for n in json.loads(r.out)["nodes"])


@pytest.mark.parametrize("engine", ENGINES)
def test_function_bodies_run_equal_to_onnxruntime(engine: str) -> None:
    model, feeds = am.functions_model()
    before = model.SerializeToString()
    expected = ort_run(model, feeds)
    for source in (model, model.SerializeToString()):
        session = InferenceSession(source, engine=engine)
        _bits(session.run(None, feeds), expected)
    assert model.SerializeToString() == before  # the caller's model is not expanded in place


def test_inspect_lists_function_body_nodes_under_onnxruntime_names(tmp_path: Path) -> None:
    model, _ = am.functions_model()
    path = tmp_path / "functions.onnx"
    onnx.save(model, path)
    names = _inspect_names(path)
    assert len(names) == am.FUNCTION_GATHER_SCATTER
    assert names == _ort_gather_scatter_names(model, tmp_path)
    # two calls of Pick with different shapes: two translations with their own sizes
    r = run_cli("inspect", path, "--json")
    nodes = {n["name"]: n for n in json.loads(r.out)["nodes"]}
    sizes = {
        name: nodes[name]["operator"]["desc"]["InputTensor"]["Sizes"]
        for name in nodes
        if name.endswith("pick_gather")
    }
    assert sorted(map(tuple, sizes.values())) == [(4, 6, 2), (5, 3), (5, 3)]
    assert all(n["status"] == "dml" for n in nodes.values())


def test_run_records_and_reports_use_the_same_names(tmp_path: Path) -> None:
    model, feeds = am.functions_model()
    path = tmp_path / "functions.onnx"
    onnx.save(model, path)
    session = InferenceSession(path)
    session.run(None, feeds)
    record = session.last_run_record
    assert record is not None
    assert sorted(n.name for n in record.nodes) == _inspect_names(path)
    emulated = sorted(n.name for n in record.nodes if n.placement == "dml")
    # the top-level nodes of the bodies are emulated; the If branches run inside onnxruntime's If
    assert len(emulated) == am.FUNCTION_GATHER_SCATTER - 2 and not any("/" in n for n in emulated)


def test_cli_run_validate_export_lower_see_function_bodies(tmp_path: Path) -> None:
    model, feeds = am.functions_model()
    path = tmp_path / "functions.onnx"
    onnx.save(model, path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    out = tmp_path / "out.npz"
    r = run_cli("run", path, "--inputs", inputs, "-o", out)
    assert r.code == 0, r.err
    with np.load(out) as data:
        _bits([data[f"y{i}"] for i in range(1, 5)], ort_run(model, feeds))
    for extra in (["--inputs", inputs], []):  # file inputs, then generated ones
        r = run_cli("validate", path, *extra)
        assert r.code == 0, r.err + r.out
        assert "_inlfunc_Pick_token_0_pick_scatter" in r.out
    r = run_cli("export", path, "-o", tmp_path / "export", "--inputs", inputs, "--json")
    assert r.code == 0, r.err
    exported = {e["node"] for e in json.loads(r.out)["exported"]}
    assert {"_inlfunc_Pick_pick_gather", "_inlfunc_Outer_outer_gather_nd"} <= exported
    lowered = tmp_path / "lowered.onnx"
    r = run_cli("lower", path, "-o", lowered)
    assert r.code == 0, r.err
    assert f"{am.FUNCTION_GATHER_SCATTER} of {am.FUNCTION_GATHER_SCATTER}" in r.out


def _unnamed_calls() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A function whose Gather and Relu are unnamed, called twice (once nested), next to an unnamed
    top-level Gather: onnxruntime reports unnamed nodes as ``<op_type>_<index in its graph>``."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inner = helper.make_function(
        am.LOCAL,
        "Inner",
        ["d", "i"],
        ["o"],
        [helper.make_node("Gather", ["d", "i"], ["g"], axis=0), helper.make_node("Relu", ["g"], ["o"])],
        opset_imports=[helper.make_opsetid("", 17)],
    )
    wrap = helper.make_function(
        am.LOCAL,
        "Wrap",
        ["d", "i"],
        ["o"],
        [
            helper.make_node("Constant", [], ["ax"], value=helper.make_tensor("a", i64, [1], [1])),
            helper.make_node("Unsqueeze", ["i", "ax"], ["i2"]),
            helper.make_node("Inner", ["d", "i"], ["t"], domain=am.LOCAL),
            helper.make_node("GatherElements", ["t", "i2"], ["o"], axis=0),
        ],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(am.LOCAL, 1)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Inner", ["x", "idx"], ["y1"], domain=am.LOCAL),
            helper.make_node("Gather", ["x", "idx"], ["y2"], axis=0),
            helper.make_node("Wrap", ["x", "idx"], ["y3"], domain=am.LOCAL),
        ],
        "unnamed",
        [helper.make_tensor_value_info("x", f32, [5, 1]), helper.make_tensor_value_info("idx", i64, [3])],
        [helper.make_tensor_value_info(n, f32, None) for n in ("y1", "y2", "y3")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(am.LOCAL, 1)],
        functions=[inner, wrap],
        ir_version=IR_VERSION,
    )
    feeds = {
        "x": np.arange(5, dtype=np.float32).reshape(5, 1) - 2,
        "idx": np.array([2, 0, 1], dtype=np.int64),
    }
    return model, feeds


@pytest.mark.parametrize("engine", ENGINES)
def test_unnamed_nodes_carry_onnxruntime_profile_names(tmp_path: Path, engine: str) -> None:
    model, feeds = _unnamed_calls()
    path = tmp_path / "unnamed.onnx"
    onnx.save(model, path)
    profile = _ort_profile_names(model, feeds, tmp_path)
    ours = _inspect_names(path)
    assert len(ours) == 4  # two Inner Gathers, the top-level Gather, Wrap's GatherElements
    assert set(ours) <= profile, (ours, sorted(profile))
    session = InferenceSession(path, engine=engine)
    _bits(session.run(None, feeds), ort_run(model, feeds))
    record = session.last_run_record
    assert record is not None and sorted(n.name for n in record.nodes) == ours


def test_generated_inputs_respect_function_bodies() -> None:
    from dmlshim.inputs import generate

    model, _ = am.functions_model()
    generated = generate(model, seed=7)  # the caller's raw model, functions not yet expanded
    # onnxruntime runs the model on them: every index in a body is in range for the node it feeds
    got = ort_run(model, generated.feeds)
    branch = (4, 3) if generated.feeds["cond"] else (3, 4)  # then: Gather axis 1, else: axis 0
    assert [a.shape for a in got] == [(2, 3), (3, 6, 2), (2, 3), branch]
    assert generated.feeds["ib"].max() < 4 and generated.feeds["sa"].max() < 3
