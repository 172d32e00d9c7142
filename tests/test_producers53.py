"""onnx_models/ecosystem/slim_* and onnxopt_*: PyTorch exports of onnx_models/real/ rewritten by onnxslim
0.1.98 and onnxoptimizer 0.4.2 (``producers_slim.py``; the graphs fold Shape->Gather chains, move
constants to initializers, drop dead code).

Everywhere: the file holds the gather/scatter nodes onnx counts in it (the numbers the rewrite left,
recorded from the files); the default InferenceSession and the custom-op engine equal onnxruntime CPU bit
for bit on the shipped inputs; inspect places on the CPU exactly the gather/scatter nodes onnxruntime-
directml 1.24.3 placed there with graph optimizations disabled (its verbose log, recorded below); inspect
predicts the refusal of the three graphs from torch.export (their allowzero Reshapes survive both tools).

Tests marked ``real`` run DirectML itself (skipped without the stack, ``dmlshim directml setup``): each
model but the three refused equals onnxruntime CPU within float rounding, and with optimizations disabled
the provider's CPU nodes are inspect's; at the default level the nodes onnxruntime folds before placement
are recorded off DirectML.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.errors import DmlShimError
from tests.corpus_checks import (
    assert_same,
    expected_gather_scatter,
    feeds_of,
    ort_reference,
    run_cli,
    session_outputs,
)

ECO = Path(__file__).resolve().parent.parent / "onnx_models" / "ecosystem"
#: gather/scatter nodes in each file (onnx's count of the rewritten graph)
COUNTS: dict[str, dict[str, int]] = {
    "slim_llama_static_cache": {"Gather": 2, "ScatterElements": 4},
    "slim_fasterrcnn": {"Gather": 37},
    "slim_bert_static": {"Gather": 4},
    "slim_gnn_scatter": {"Gather": 10, "ScatterElements": 6},
    "slim_beam_search": {"Gather": 2, "GatherElements": 2, "ScatterElements": 1, "ScatterND": 1},
    "slim_mixtral_moe_nofusion": {"Gather": 26},
    "onnxopt_llama_static_cache": {"Gather": 2, "ScatterElements": 8},
    "onnxopt_fasterrcnn": {"Gather": 71},
    "onnxopt_gpt2_past_shape_gather": {"Gather": 40},
    "onnxopt_gnn_scatter_extract": {"Gather": 11, "ScatterElements": 6},
    "onnxopt_beam_search": {"Gather": 2, "GatherElements": 2, "ScatterElements": 1, "ScatterND": 1},
    "slim_llama_static_cache_dynamo": {"Gather": 2, "ScatterND": 4},
    "slim_bart_decoder_past_dynamo": {"Gather": 2, "GatherND": 1},
    "onnxopt_mixtral_moe_dynamo": {"Gather": 1, "GatherND": 5},
}
MODELS = tuple(COUNTS)
#: torch.export graphs keep their Reshape(allowzero=1) with a -1 through both rewrites: onnxruntime-directml
#: refuses them (docs/directml-linux.md, EP_REFUSES_RESHAPE_ALLOWZERO), at session creation where the
#: shapes are static (the static-cache Llama), else at the first run
REFUSED = {
    "slim_llama_static_cache_dynamo": "80070057",
    "slim_bart_decoder_past_dynamo": "8007023E",
    "onnxopt_mixtral_moe_dynamo": "80070057",
}
_GNN_CPU = {"/Gather_2", "/Gather_6", *(f"/ScatterElements{s}" for s in ("", "_1", "_2", "_3", "_4", "_5"))}
_LLAMA_SHAPE_SCATTERS = {
    f"/model/model/layers.{i}/self_attn/ScatterElements{s}" for i in (0, 1) for s in ("", "_2")
}
#: gather/scatter nodes onnxruntime-directml 1.24.3 (DirectML 1.15.4) placed on its CPU provider with graph
#: optimizations disabled (its verbose log), by name where few, else how many
REAL_CPU: dict[str, set[str] | int] = {
    "slim_llama_static_cache": set(),
    "slim_fasterrcnn": {"/model/roi_heads/Gather_1"},
    "slim_bert_static": set(),
    "slim_gnn_scatter": _GNN_CPU,
    "slim_beam_search": {"/Gather"},
    "slim_mixtral_moe_nofusion": 20,
    "onnxopt_llama_static_cache": _LLAMA_SHAPE_SCATTERS,
    "onnxopt_fasterrcnn": 30,
    "onnxopt_gpt2_past_shape_gather": 37,
    "onnxopt_gnn_scatter_extract": {*_GNN_CPU, "/Gather_10"},
    "onnxopt_beam_search": {"/Gather"},
    "slim_bart_decoder_past_dynamo": set(),
    "onnxopt_mixtral_moe_dynamo": set(),
}

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _path(name: str) -> Path:
    return ECO / f"{name}.onnx"


def test_every_slim_and_onnxopt_file_is_here() -> None:
    shipped = sorted(p.stem for p in [*ECO.glob("slim_*.onnx"), *ECO.glob("onnxopt_*.onnx")])
    assert shipped == sorted(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_file_holds_the_rewritten_gather_scatter_nodes(name: str) -> None:
    assert dict(expected_gather_scatter(_path(name))) == COUNTS[name]


@pytest.mark.parametrize("name", MODELS)
def test_default_session_equals_onnxruntime(name: str) -> None:
    assert_same(session_outputs(_path(name), None), ort_reference(_path(name))[1], name)


@pytest.mark.parametrize("name", MODELS)
def test_customop_engine_equals_onnxruntime(name: str) -> None:
    assert_same(session_outputs(_path(name), "customop"), ort_reference(_path(name))[1], name)


@pytest.mark.parametrize("name", sorted(REAL_CPU))  # all but the model whose session is refused
def test_inspect_places_on_cpu_what_real_directml_did(name: str) -> None:
    run = run_cli("inspect", str(_path(name)), "--json", "-q")
    assert run.code in (0, 1) and run.doc is not None, run.message
    # REAL_CPU is the placement with optimizations off: a node inspect reports removed (at onnxruntime's
    # default level) was on the CPU then only when another placement reason says so
    on_cpu = {
        n["name"]
        for n in run.doc["nodes"]
        if n["ort_placement"] == "CPUExecutionProvider"
        and [r["code"] for r in n.get("reasons", []) if r["code"].startswith("EP_")] != ["EP_OPTIMIZED_AWAY"]
    }
    want = REAL_CPU[name]
    assert (len(on_cpu) if isinstance(want, int) else on_cpu) == want
    assert {n["ort_placement"] for n in run.doc["nodes"]} <= {"CPUExecutionProvider", "DmlExecutionProvider"}


# --- real DirectML 1.15.4 (skipped without the stack) ------------------------------------------------


def _unoptimized() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


@pytest.mark.parametrize("name", MODELS)
def test_inspect_predicts_the_refusals(name: str) -> None:
    run = run_cli("inspect", str(_path(name)), "--json", "-q")
    assert run.doc is not None, run.message
    codes = {r["code"] for r in run.doc["summary"]["session_refusals"]}
    assert codes == ({"EP_REFUSES_RESHAPE_ALLOWZERO"} if name in REFUSED else set())


@real
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_real_directml_refuses_the_allowzero_reshapes(name: str) -> None:
    path = _path(name)
    with pytest.raises(DmlShimError, match=REFUSED[name]) as caught:
        InferenceSession(str(path), engine="directml").run(None, dict(feeds_of(path)))
    assert "EP_REFUSES_RESHAPE_ALLOWZERO" in str(caught.value)


@real
@pytest.mark.parametrize("name", [n for n in MODELS if n not in REFUSED])
def test_real_directml_runs_and_places_like_inspect(name: str) -> None:
    path = _path(name)
    session = InferenceSession(str(path), sess_options=_unoptimized(), engine="directml")
    got = session.run(None, dict(feeds_of(path)))
    for g, w in zip(got, ort_reference(path)[1], strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
    record = session.last_run_record
    assert record is not None
    on_cpu = {n.name for n in record.nodes if n.ort_placement == "CPUExecutionProvider"}
    want = REAL_CPU[name]
    assert (len(on_cpu) if isinstance(want, int) else on_cpu) == want


#: the top-level gather/scatter nodes onnxruntime 1.32's level-1 optimizations (constant folding, then
#: dropping the nodes only folded ones read) remove from each model: onnxruntime's own saved graph at
#: ORT_ENABLE_BASIC, recorded
_FRCNN_AWAY = 30
OPTIMIZED_AWAY: dict[str, set[str] | int] = {
    "onnxopt_llama_static_cache": _LLAMA_SHAPE_SCATTERS,
    "onnxopt_fasterrcnn": _FRCNN_AWAY,
    "slim_llama_static_cache": set(),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZED_AWAY))
def test_optimized_away_nodes_are_the_ones_onnxruntime_removes(name: str) -> None:
    import onnx

    from dmlshim.directml.optimized_away import optimized_away_nodes

    model = onnx.load(str(_path(name)))
    away = optimized_away_nodes(model, "all")
    want = OPTIMIZED_AWAY[name]
    assert (len(away) if isinstance(want, int) else away) == want
    assert optimized_away_nodes(model, "disabled") == frozenset()


def test_optimized_away_keeps_a_twin_that_survives() -> None:
    # two identical Gathers on a graph input: common-subexpression elimination keeps one, which runs
    from onnx import TensorProto, helper

    from dmlshim.directml.optimized_away import optimized_away_nodes
    from tests.oracle import IR_VERSION

    idx = helper.make_tensor("idx", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "idx"], ["a"], name="g1"),
            helper.make_node("Gather", ["x", "idx"], ["b"], name="g2"),
            helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        ],
        "twins",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [idx],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    assert optimized_away_nodes(model, "all") == frozenset()


@real
def test_real_directml_records_optimized_away_nodes_off_directml() -> None:
    # onnxruntime's default level folds the cache-shape ScatterElements before placing nodes: its log lists
    # none of them, and the record used to call them DirectML nodes; inspect places them on the CPU
    path = _path("onnxopt_llama_static_cache")
    session = InferenceSession(str(path), engine="directml")
    session.run(None, dict(feeds_of(path)))
    record = session.last_run_record
    assert record is not None
    away = {n.name for n in record.nodes if "ORT_OPTIMIZED_AWAY" in dict(n.reasons)}
    assert away == _LLAMA_SHAPE_SCATTERS
    assert {n.name for n in record.nodes if n.ort_placement == "CPUExecutionProvider"} == away
    assert set(dict(record.device)["nodes_optimized_away"].split(", ")) == away


def test_node_records_name_the_optimized_away_nodes() -> None:
    import onnx

    from dmlshim.directml.records import REASON_OPTIMIZED_AWAY, node_records
    from dmlshim.dml.enums import FeatureLevel

    model = onnx.load(str(_path("onnxopt_llama_static_cache")))
    records = node_records(
        model,
        FeatureLevel.FL_5_0,
        lambda t: "CPUExecutionProvider" if t.name in _LLAMA_SHAPE_SCATTERS else "DmlExecutionProvider",
        _LLAMA_SHAPE_SCATTERS,
    )
    away = {r.name for r in records if REASON_OPTIMIZED_AWAY in dict(r.reasons)}
    assert away == _LLAMA_SHAPE_SCATTERS
    assert {r.name for r in records if r.placement == "dml"} == {r.name for r in records} - away
