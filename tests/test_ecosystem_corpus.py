"""dmlshim on the ecosystem corpus (onnx_models/ecosystem/: skl2onnx, hummingbird-ml, onnxscript with
model-local functions, onnxruntime.quantization, onnx.version_converter, onnxsim, jax2onnx, tf2onnx and
hand-written forms; see its README and manifest.json).

Per model: validate exits 0 with the shipped inputs and with generated ones; inspect reports every
gather/scatter node, function bodies included (counted from the file, once per call site), with no node
in error and none SHAPE_UNKNOWN; the default
InferenceSession, ``engine="customop"`` and ``dmlshim run -o`` give onnxruntime CPU's outputs bit for bit.

``PENDING`` holds the (model, check) pairs that fail today, each with the failure it shows (issue 19
items 1-5 are being fixed on other branches). They run as ``xfail(strict=True)``: once a fix lands the
pair passes, the test fails loudly, and the entry must be deleted. The set may only shrink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.corpus_checks import (
    assert_same,
    cli_run_outputs,
    expected_gather_scatter,
    feeds_of,
    inspected_gather_scatter,
    ort_reference,
    run_cli,
    session_outputs,
)

ECO = Path(__file__).resolve().parents[1] / "onnx_models" / "ecosystem"
MANIFEST = json.loads((ECO / "manifest.json").read_text())["models"]
NAMES = sorted(e["name"] for e in MANIFEST)
MAX_BYTES = 2 * 1024 * 1024
CHECKS = (
    "validate_inputs",
    "validate_generated",
    "inspect_count",
    "inspect_clean",
    "session",
    "customop",
    "cli_run",
)

_NOSHAPE_GENERATED = (
    "graph input 'data' has no shape (unknown rank): generated inputs and inspect need --input-shape"
)

#: (model, check) -> the failure it shows today. Delete an entry when its fix lands (strict xfail).
PENDING: dict[tuple[str, str], str] = {
    # A graph input with an element type and no shape has no rank: inputs cannot be generated for it and
    # inspect cannot size its nodes without --input-shape (validate says so, exit 2).
    ("hw_noshape_inputs", "validate_generated"): _NOSHAPE_GENERATED,
    ("hw_noshape_inputs", "inspect_clean"): _NOSHAPE_GENERATED,
    # GroupQueryAttention needs past_key's last dimension (kv_cache_dim) to be the head size (16) and
    # onnxruntime says so only when it runs: no generated choice of the symbolic dimensions fits (validate
    # says so, naming --input-shape; with --input-shape kv_cache_dim=16 it exits 0).
    ("genai_llama_gqa", "validate_generated"): (
        "could not generate inputs that onnxruntime CPU accepts: kv_cache_dim must be the head size"
    ),
}


def _cases(check: str) -> list[Any]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=PENDING[(name, check)]))
        if (name, check) in PENDING
        else name
        for name in NAMES
    ]


def _path(name: str) -> Path:
    return ECO / f"{name}.onnx"


def test_pending_names_real_models_and_checks() -> None:
    assert {m for m, _ in PENDING} <= set(NAMES)
    assert {c for _, c in PENDING} <= set(CHECKS)


def test_corpus_covers_every_producer_and_form() -> None:
    producers = {e["producer"] for e in MANIFEST}
    for needed in (
        "skl2onnx",
        "hummingbird-ml",
        "onnxscript",
        "onnxruntime.quantization",
        "onnx.version_converter",
        "onnxsim",
        "jax2onnx",
        "handwritten",
    ):
        assert needed in producers, needed
    assert sum(e["functions"] > 0 for e in MANIFEST) >= 3
    assert any(e["external_data"] for e in MANIFEST)
    assert {21, 22, 23} <= {e["opsets"].get("ai.onnx") for e in MANIFEST}
    on_disk = sorted(p.stem for p in ECO.glob("*.onnx"))
    assert on_disk == NAMES, "onnx_models/ecosystem/ and manifest.json disagree"
    assert sorted(p.stem for p in ECO.glob("*.npz")) == NAMES
    readme = (ECO / "README.md").read_text(encoding="utf-8")
    assert [n for n in NAMES if f"`{n}.onnx`" not in readme] == []


@pytest.mark.parametrize("name", NAMES)
def test_file_matches_manifest_and_onnxruntime_runs_it(name: str) -> None:
    entry = next(e for e in MANIFEST if e["name"] == name)
    path = _path(name)
    size = path.stat().st_size
    if entry["external_data"]:
        size += (ECO / entry["external_data"]).stat().st_size
    assert size == entry["bytes"] < MAX_BYTES
    model = onnx.load(str(path), load_external_data=False)
    assert model.ir_version <= 10
    assert dict(expected_gather_scatter(path)) == entry["gather_scatter_ops"]
    feeds = feeds_of(path)
    initializers = {i.name for i in model.graph.initializer}
    assert sorted(feeds) == sorted(i.name for i in model.graph.input if i.name not in initializers)
    _, outputs = ort_reference(path)
    assert len(outputs) == len(model.graph.output) == entry["outputs"]


@pytest.mark.parametrize("name", _cases("validate_inputs"))
def test_validate_with_shipped_inputs_exits_0(name: str) -> None:
    run = run_cli("validate", str(_path(name)), "--inputs", str(_path(name).with_suffix(".npz")), "-q")
    assert run.code == 0, f"{name}: exit {run.code}: {run.message}"


@pytest.mark.parametrize("name", _cases("validate_generated"))
def test_validate_with_generated_inputs_exits_0(name: str) -> None:
    run = run_cli("validate", str(_path(name)), "-q")
    assert run.code == 0, f"{name}: exit {run.code}: {run.message}"


def _inspect(name: str) -> dict[str, Any]:
    run = run_cli("inspect", str(_path(name)), "--json", "-q")
    # 1 = some node falls back (docs/inspect.md); 2 = the model or an input was refused.
    assert run.code in (0, 1) and run.doc is not None, f"{name}: exit {run.code}: {run.message}"
    return run.doc


@pytest.mark.parametrize("name", _cases("inspect_count"))
def test_inspect_sees_every_gather_scatter_node(name: str) -> None:
    assert inspected_gather_scatter(_inspect(name)) == expected_gather_scatter(_path(name))


@pytest.mark.parametrize("name", _cases("inspect_clean"))
def test_inspect_gives_no_error_and_no_unknown_shape(name: str) -> None:
    """onnxruntime runs every model here, so no node may be an error, and every shape is known to
    onnxruntime, so none may be SHAPE_UNKNOWN (issue 19's "done when")."""
    bad = [
        (n["name"], n["status"], [r.get("code") for r in n.get("reasons", [])])
        for n in _inspect(name)["nodes"]
        if n["status"] == "error" or any(r.get("code") == "SHAPE_UNKNOWN" for r in n.get("reasons", []))
    ]
    assert bad == [], f"{name}: {bad}"


@pytest.mark.parametrize("name", _cases("session"))
def test_inference_session_equals_onnxruntime(name: str) -> None:
    assert_same(session_outputs(_path(name), None), ort_reference(_path(name))[1], name)


@pytest.mark.parametrize("name", _cases("customop"))
def test_customop_engine_equals_onnxruntime(name: str) -> None:
    assert_same(session_outputs(_path(name), "customop"), ort_reference(_path(name))[1], name)


@pytest.mark.parametrize("name", _cases("cli_run"))
def test_cli_run_output_equals_onnxruntime(name: str, tmp_path: Path) -> None:
    run, got = cli_run_outputs(_path(name), tmp_path / "out.npz")
    assert run.code == 0, f"{name}: exit {run.code}: {run.message}"
    assert_same(got, ort_reference(_path(name))[1], name)
