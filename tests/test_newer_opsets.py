"""Models at ai.onnx opsets 23, 24 and 25 (onnx 1.20, the floor, defines up to 25; onnxruntime 1.24.4, the
floor, loads up to 25): dmlshim accepts exactly what onnxruntime accepts there, and run, validate and
inspect agree with onnxruntime's CPU provider.

Each model holds Gather (its indices from TopK, new at opset 24), GatherND with batch_dims, ScatterND,
ScatterElements with a reduction (which DirectML lacks: it falls back), RMSNormalization (new at opset 23)
and Reshape (a new version at each of these opsets). Expected values come from onnxruntime CPU with one
thread; what onnxruntime refuses (Swish at opset 25 on onnxruntime 1.24.4, an opset past the newest it
knows) comes from onnxruntime too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.corpus_checks import (
    assert_same,
    cli_run_outputs,
    expected_gather_scatter,
    inspected_gather_scatter,
    ort_reference,
    run_cli,
    session_outputs,
    single_thread,
)
from tests.oracle import IR_VERSION

OPSETS = (23, 24, 25)
GATHER_SCATTER = ("Gather", "GatherND", "ScatterND", "ScatterElements")
PLACEMENTS = {
    "gather": "dml",
    "gather_nd": "dml",
    "scatter_nd": "dml",
    "scatter_elements": "onnxruntime-cpu",  # DirectML has no scatter reduction (reduction="max")
}


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2325)
    return {
        "x": rng.standard_normal((4, 6)).astype(np.float32),
        "k": np.array([2], np.int64),
        "updates": rng.standard_normal((2, 6)).astype(np.float32),
        "nd_data": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "nd_indices": np.array([[[2], [0]], [[1], [1]]], np.int64),
        "scale": rng.uniform(0.5, 1.5, 6).astype(np.float32),
    }


def _model(opset: int) -> onnx.ModelProto:
    feeds = _feeds()
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for name, a in feeds.items()
    ]
    initializers = [
        numpy_helper.from_array(np.array([[3], [1]], np.int64), "nd_rows"),
        numpy_helper.from_array(np.array([[0, 3, 2, 1, 3, 0], [2, 1, 0, 3, 2, 1]], np.int64), "el_rows"),
        numpy_helper.from_array(np.array([-1], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["top_values", "top_indices"], axis=1, name="topk"),
        helper.make_node("Gather", ["x", "top_indices"], ["gathered"], axis=-1, name="gather"),
        helper.make_node(
            "GatherND", ["nd_data", "nd_indices"], ["nd_gathered"], batch_dims=1, name="gather_nd"
        ),
        helper.make_node("Reshape", ["nd_gathered", "flat"], ["nd_flat"], name="reshape"),
        helper.make_node("ScatterND", ["x", "nd_rows", "updates"], ["nd_scattered"], name="scatter_nd"),
        helper.make_node(
            "ScatterElements",
            ["x", "el_rows", "updates"],
            ["el_scattered"],
            axis=0,
            reduction="max",
            name="scatter_elements",
        ),
        helper.make_node(
            "RMSNormalization", ["nd_scattered", "scale"], ["normalized"], axis=-1, name="rms_norm"
        ),
    ]
    outputs = [
        onnx.ValueInfoProto(name=n)
        for n in ("top_values", "gathered", "nd_flat", "el_scattered", "normalized")
    ]
    graph = helper.make_graph(nodes, f"opset{opset}", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _one_node(op_type: str, opset: int) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], name=op_type.lower())
    graph = helper.make_graph(
        [node],
        op_type,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [onnx.ValueInfoProto(name="y")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Each opset's model file, with its inputs beside it (MODEL.npz, as ``--inputs`` and the corpus
    helpers read them)."""
    root = tmp_path_factory.mktemp("newer_opsets")
    paths = {}
    for opset in OPSETS:
        path = root / f"opset{opset}.onnx"
        onnx.save(_model(opset), str(path))
        np.savez(path.with_suffix(".npz"), **_feeds())
        paths[opset] = path
    return paths


def _ort_refusal(model: onnx.ModelProto) -> Exception | None:
    try:
        ort.InferenceSession(model.SerializeToString(), single_thread(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own classes (Fail, NotImplemented, ...)
        return exc
    return None


@pytest.mark.parametrize("opset", OPSETS)
def test_onnxruntime_loads_them_with_every_gather_scatter_node(models: dict[int, Path], opset: int) -> None:
    model = onnx.load(str(models[opset]))
    assert _ort_refusal(model) is None
    assert dict(expected_gather_scatter(models[opset])) == {
        "Gather": 1, "GatherND": 1, "ScatterND": 1, "ScatterElements": 1,
    }  # fmt: skip


@pytest.mark.parametrize("opset", OPSETS)
def test_session_equals_onnxruntime(models: dict[int, Path], opset: int) -> None:
    from dmlshim import InferenceSession

    path = models[opset]
    assert_same(session_outputs(path, None), ort_reference(path)[1], f"opset {opset}")
    sess = InferenceSession(str(path), sess_options=single_thread())
    sess.run(None, _feeds())
    assert {n.name: n.placement for n in sess.last_run_record.nodes} == PLACEMENTS
    (elements,) = (n for n in sess.last_run_record.nodes if n.name == "scatter_elements")
    assert elements.reasons[0][0] == "SCATTER_REDUCTION_UNSUPPORTED"


@pytest.mark.parametrize("opset", OPSETS)
def test_validate_with_the_inputs_exits_0(models: dict[int, Path], opset: int) -> None:
    path = models[opset]
    run = run_cli("validate", str(path), "--inputs", str(path.with_suffix(".npz")), "-q")
    assert run.code == 0, f"opset {opset}: exit {run.code}: {run.message}"


@pytest.mark.parametrize("opset", OPSETS)
def test_inspect_sees_every_node_with_known_shapes(models: dict[int, Path], opset: int) -> None:
    path = models[opset]
    run = run_cli("inspect", str(path), "--json", "-q")
    # exit 1: a node falls back (the ScatterElements reduction), as docs/inspect.md says
    assert run.code == 1 and run.doc is not None, f"opset {opset}: exit {run.code}: {run.message}"
    assert inspected_gather_scatter(run.doc) == expected_gather_scatter(path)
    bad = [
        (n["name"], n["status"], [r.get("code") for r in n.get("reasons", [])])
        for n in run.doc["nodes"]
        if n["status"] == "error" or any(r.get("code") == "SHAPE_UNKNOWN" for r in n.get("reasons", []))
    ]
    assert bad == []
    statuses = {n["name"]: n["status"] for n in run.doc["nodes"] if n["op_type"] in GATHER_SCATTER}
    assert statuses == {name: "fallback" if p != "dml" else "dml" for name, p in PLACEMENTS.items()}


@pytest.mark.parametrize("opset", OPSETS)
def test_cli_run_equals_onnxruntime(models: dict[int, Path], opset: int, tmp_path: Path) -> None:
    run, got = cli_run_outputs(models[opset], tmp_path / "out.npz")
    assert run.code == 0, f"opset {opset}: exit {run.code}: {run.message}"
    assert_same(got, ort_reference(models[opset])[1], f"opset {opset}")


@pytest.mark.parametrize("opset", (24, 25))
def test_swish_loads_exactly_where_onnxruntime_loads_it(opset: int) -> None:
    """Swish is new at opset 24; onnxruntime 1.24.4 has a kernel for Swish-24 and refuses the model at
    opset 25 (NotImplemented), a newer onnxruntime runs both. dmlshim does what the installed one does."""
    from dmlshim import InferenceSession

    model = _one_node("Swish", opset)
    theirs = _ort_refusal(model)
    x = {"x": _feeds()["x"]}
    if theirs is not None:
        with pytest.raises(type(theirs)):
            InferenceSession(model.SerializeToString(), sess_options=single_thread())
        return
    want = ort.InferenceSession(
        model.SerializeToString(), single_thread(), providers=["CPUExecutionProvider"]
    )
    got = InferenceSession(model.SerializeToString(), sess_options=single_thread())
    assert_same(got.run(None, x), want.run(None, x), f"Swish at opset {opset}")


def _newest_opset_onnxruntime_loads() -> int:
    opset = 25  # onnxruntime 1.24.4, the floor, loads up to 25
    while _ort_refusal(_one_node("Identity", opset + 1)) is None:
        opset += 1
    return opset


def test_an_opset_past_onnxruntime_is_refused_as_onnxruntime_refuses_it(tmp_path: Path) -> None:
    """One opset past the newest the installed onnxruntime loads: onnxruntime refuses it, and so does dmlshim
    (onnxruntime's class from a session; exit 2 from validate, naming the opset and quoting onnxruntime's
    limit), whether or not the installed onnx defines that opset."""
    from dmlshim import InferenceSession

    beyond = _newest_opset_onnxruntime_loads() + 1
    model = _model(beyond)
    theirs = _ort_refusal(model)
    assert theirs is not None
    with pytest.raises(type(theirs)) as info:
        InferenceSession(model.SerializeToString(), sess_options=single_thread())
    limit = f"till opset {beyond - 1}"  # onnxruntime's own words for its limit
    assert limit in str(theirs) and limit in str(info.value)
    path = tmp_path / f"opset{beyond}.onnx"
    onnx.save(model, str(path))
    np.savez(path.with_suffix(".npz"), **_feeds())
    for command in ("validate", "inspect", "run"):
        run = run_cli(command, str(path), "--inputs", str(path.with_suffix(".npz")), "-q")
        assert run.code == 2, (command, run.code, run.message)
        assert str(beyond) in run.message and limit in run.message, (command, run.message)
