"""dmlshim on the real-architecture corpus (onnx_models/real/, see its README and manifest.json).

The models were written by PyTorch's exporters from transformers/torchvision networks, not by us; what
they must satisfy comes from outside dmlshim: onnxruntime CPU runs them (the export script checked
onnxruntime against PyTorch), onnx's own shape inference says which node inputs have known ranks, and
the manifest's op counts are recounted from the files.

Issue 11 asks for: validate exits 0 with the shipped inputs and with random inputs, inspect leaves no
node SHAPE_UNKNOWN whose input ranks are known, and inspect and validate report the same
``ort_placement`` for every node. ``PENDING`` lists the (check, model) pairs that fail on main (empty
since the fixes of issue 11 landed); such pairs are left out of collection, not expected to fail, and
the list may only shrink.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

REAL = Path(__file__).resolve().parents[1] / "onnx_models" / "real"
sys.path.insert(0, str(REAL))
import corpus_results as cr  # noqa: E402  (lives beside the models it runs)

MAX_BYTES = 2 * 1024 * 1024
ENTRIES = cr.load_manifest()
NAMES = [e["name"] for e in ENTRIES]

#: (check -> models) still failing on main; see the module docstring.
PENDING: dict[str, frozenset[str]] = {
    "validate_inputs": frozenset(),
    "validate_random": frozenset(),
    "inspect_shape_unknown": frozenset(),
    "placement": frozenset(),
    "inspect_status": frozenset(),
}


def _cases(check: str) -> list[Any]:
    return [name for name in NAMES if name not in PENDING[check]]


def _entry(name: str) -> dict[str, Any]:
    return next(e for e in ENTRIES if e["name"] == name)


def test_corpus_has_the_architectures_issue_11_asks_for() -> None:
    assert len(ENTRIES) >= 12
    archs = " ".join(e["architecture"] for e in ENTRIES)
    for needed in ("GPT2", "Llama", "Bert", "Bart", "Mixtral", "GCN", "RCNN"):
        assert needed in archs, needed
    assert {e["exporter"] for e in ENTRIES} == {"dynamo", "torchscript"}
    assert {e["dtype"] for e in ENTRIES} == {"float32", "float16", "int8"}
    assert any(e["control_flow_ops"].get("Loop") for e in ENTRIES)
    assert any(e["control_flow_ops"].get("If") for e in ENTRIES)
    for op in ("Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"):
        assert any(op in e["gather_scatter_ops"] for e in ENTRIES), op
    # Every model file on disk is in the manifest and vice versa.
    assert sorted(p.name for p in REAL.glob("*.onnx")) == sorted(e["file"] for e in ENTRIES)


@pytest.mark.parametrize("name", NAMES)
def test_file_matches_manifest_and_runs_in_onnxruntime(name: str) -> None:
    entry = _entry(name)
    path, npz = cr.model_path(entry), cr.inputs_path(entry)
    assert path.stat().st_size == entry["onnx_bytes"] < MAX_BYTES
    model = onnx.load(str(path))
    assert model.ir_version <= 10
    assert {o.domain: o.version for o in model.opset_import}.get("", 0) == entry["opset"]
    counts: dict[str, int] = {}
    for graph in cr._graphs(model.graph):
        for node in graph.node:
            if node.op_type in cr.GATHER_SCATTER_OPS:
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
    assert counts == entry["gather_scatter_ops"]
    with np.load(npz, allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    assert sorted(feeds) == sorted(i.name for i in model.graph.input)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    assert len(outputs) == len(model.graph.output)


@pytest.mark.parametrize("name", _cases("validate_inputs"))
def test_validate_with_shipped_inputs_exits_0(name: str) -> None:
    run = cr.validate(name, with_inputs=True)
    assert run.code == 0, f"{name}: exit {run.code}: {run.message}"
    doc = run.doc
    assert doc is not None and doc["match"] is True


@pytest.mark.parametrize("name", _cases("validate_random"))
def test_validate_with_random_inputs_exits_0(name: str) -> None:
    run = cr.validate(name, with_inputs=False)
    assert run.code == 0, f"{name}: exit {run.code}: {run.message}"
    assert run.doc is not None


@pytest.mark.parametrize("name", _cases("inspect_shape_unknown"))
def test_inspect_no_shape_unknown_where_ranks_are_known(name: str) -> None:
    doc = cr.inspect(name).doc
    assert doc is not None, cr.inspect(name).message
    known = cr.rank_known_nodes(name)
    wrong = [n for n in cr.shape_unknown_nodes(doc) if n in known]
    assert wrong == [], f"{name}: SHAPE_UNKNOWN although onnx infers every input's rank: {wrong[:5]}"


@pytest.mark.parametrize("name", _cases("placement"))
def test_inspect_and_validate_agree_on_every_placement(name: str) -> None:
    inspected = cr.inspect(name).doc
    validated = cr.validate(name, with_inputs=True).doc
    assert inspected is not None and validated is not None
    a, b = cr.placements(inspected), cr.placements(validated)
    assert set(a) == set(b)
    assert sum(_entry(name)["gather_scatter_ops"].values()) == len(a)
    # a node onnxruntime's optimizations remove is in no partition (inspect: EP_OPTIMIZED_AWAY); validate's
    # engine runs it itself, where the graph alone places it
    removed = {
        n["name"]
        for n in inspected["nodes"]
        if any(r.get("code") == "EP_OPTIMIZED_AWAY" for r in n["reasons"])
    }
    differ = [(n, a[n], b[n]) for n in sorted(a) if a[n] != b[n] and n not in removed]
    assert differ == [], f"{name}: inspect vs validate placements differ: {differ[:5]}"


@pytest.mark.parametrize("name", _cases("inspect_status"))
def test_inspect_claims_no_fallback_that_validate_does_not_see(name: str) -> None:
    """A node inspect says falls back (or cannot be translated) must not run as a DirectML operator when
    validate runs the model: inspect may leave size rules to run time, never fail them on its own."""
    inspected = cr.inspect(name).doc
    assert inspected is not None
    ran = {}
    for with_inputs in (True, False):
        doc = cr.validate(name, with_inputs=with_inputs).doc
        assert doc is not None
        for node in doc["nodes"]:
            if node["status"] == "dml":
                ran[node["name"]] = node["status"]
    wrong = [
        (node["name"], node["status"], [r.get("code") for r in node.get("reasons", [])])
        for node in inspected["nodes"]
        if node["status"] != "dml" and node["name"] in ran
    ]
    assert wrong == [], (
        f"{name}: inspect says these do not run as DirectML operators, validate ran them: {wrong}"
    )


@pytest.mark.parametrize("level", ["1_0", "3_0", "4_1"])
@pytest.mark.parametrize("name", _cases("validate_inputs"))
def test_validate_at_lower_feature_levels_exits_0(name: str, level: str) -> None:
    """Below 4_1 64-bit indices are emulated and below 3_0 negative indices are not native; the real
    models must still match onnxruntime CPU there."""
    entry = _entry(name)
    run = cr.run_cli(
        "validate",
        str(cr.model_path(entry)),
        "--inputs",
        str(cr.inputs_path(entry)),
        "--feature-level",
        level,
    )
    assert run.code == 0, f"{name} at {level}: exit {run.code}: {run.message}"


@pytest.mark.parametrize("name", _cases("validate_random"))
def test_validate_with_other_random_inputs_exits_0(name: str) -> None:
    entry = _entry(name)
    run = cr.run_cli("validate", str(cr.model_path(entry)), "--seed", "7")
    assert run.code == 0, f"{name} (--seed 7): exit {run.code}: {run.message}"


def _named_symbols(entry: dict[str, Any]) -> dict[str, int]:
    """Sizes to ask for: every plain-named symbol except totals (derived from the others)."""
    return {
        s: (2 if "batch" in s else 3)
        for s in entry["symbolic_dims"]
        if s.isidentifier() and not s.startswith(("total", "unk__"))
    }


@pytest.mark.parametrize("name", [n for n in _cases("validate_random") if _named_symbols(_entry(n))])
def test_validate_input_shape_by_symbol_name(name: str) -> None:
    entry = _entry(name)
    sizes = _named_symbols(entry)
    argv = ["validate", str(cr.model_path(entry)), "--json"]
    for symbol, size in sizes.items():
        argv += ["--input-shape", f"{symbol}={size}"]
    run = cr.run_cli(*argv)
    assert run.code == 0, f"{name} {sizes}: exit {run.code}: {run.message}"
    assert run.doc is not None
    shapes = run.doc["inputs"]["shapes"]
    for input_name, dims in entry["inputs"].items():
        for axis, dim in enumerate(dims):
            if dim in sizes:
                assert shapes[input_name][axis] == sizes[dim], (input_name, axis, dim)
