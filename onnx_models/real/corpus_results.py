"""Run dmlshim's CLI on every model of the real corpus and collect what a user would read.

Used by ``tests/test_real_corpus.py`` and ``results_table.py``; needs only dmlshim's own dependencies
(onnx, onnxruntime, numpy), never torch. Each command runs in-process through ``dmlshim.cli.main.main``
with stdout/stderr captured, exactly as the console script would.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import onnx

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
GATHER_SCATTER_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)


@dataclass(frozen=True)
class CliRun:
    """One CLI invocation: exit code, stdout, stderr and the parsed JSON document (if stdout was JSON)."""

    argv: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def doc(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.out)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def message(self) -> str:
        """The first line a user reads when the command did not succeed."""
        text = self.err.strip() or self.out.strip()
        for line in text.splitlines():
            if "error" in line.lower() or line.startswith(("verdict", "Traceback")):
                return line.strip()
        return text.splitlines()[-1].strip() if text else ""


def load_manifest() -> list[dict[str, Any]]:
    return list(json.loads(MANIFEST.read_text())["models"])


def run_cli(*argv: str) -> CliRun:
    from dmlshim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
        except Exception as exc:  # a traceback is a failure the caller must name, not crash on
            return CliRun(tuple(argv), 99, out.getvalue(), f"Traceback: {type(exc).__name__}: {exc}")
    return CliRun(tuple(argv), code, out.getvalue(), err.getvalue())


def model_path(entry: dict[str, Any]) -> Path:
    return HERE / entry["file"]


def inputs_path(entry: dict[str, Any]) -> Path:
    return HERE / entry["inputs_file"]


@cache
def validate(name: str, with_inputs: bool, json_form: bool = True) -> CliRun:
    entry = _entry(name)
    argv = ["validate", str(model_path(entry))]
    if with_inputs:
        argv += ["--inputs", str(inputs_path(entry))]
    if json_form:
        argv.append("--json")
    return run_cli(*argv)


@cache
def inspect(name: str, json_form: bool = True) -> CliRun:
    argv = ["inspect", str(model_path(_entry(name)))]
    if json_form:
        argv.append("--json")
    return run_cli(*argv)


@cache
def _entries() -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in load_manifest()}


def _entry(name: str) -> dict[str, Any]:
    return _entries()[name]


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


@cache
def rank_known_nodes(name: str) -> frozenset[str]:
    """Gather/scatter nodes whose every input has a known rank and element type after onnx's own shape
    inference (with data propagation) — independent of dmlshim. Subgraph nodes included."""
    model = onnx.load(str(model_path(_entry(name))))
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    known: dict[str, bool] = {}
    for graph in _graphs(inferred.graph):
        for init in graph.initializer:
            known[init.name] = True
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            t = vi.type.tensor_type
            known[vi.name] = known.get(vi.name, False) or (t.elem_type != 0 and t.HasField("shape"))
        for node in graph.node:
            if node.op_type == "Constant":
                for out in node.output:
                    known[out] = True
    result = set()
    for graph in _graphs(inferred.graph):
        for node in graph.node:
            ops_match = node.domain in ("", "ai.onnx") and node.op_type in GATHER_SCATTER_OPS
            if ops_match and all(known.get(i, False) for i in node.input if i):
                result.add(node.name)
    return frozenset(result)


def shape_unknown_nodes(doc: dict[str, Any]) -> list[str]:
    """Names of the nodes whose inspect/validate record carries a SHAPE_UNKNOWN reason."""
    names = []
    for node in doc.get("nodes", []):
        codes = {r.get("code") if isinstance(r, dict) else None for r in node.get("reasons", [])}
        if "SHAPE_UNKNOWN" in codes:
            names.append(node["name"])
    return names


def placements(doc: dict[str, Any]) -> dict[str, Any]:
    return {node["name"]: node.get("ort_placement") for node in doc.get("nodes", [])}


def placement_disagreements(name: str) -> list[tuple[str, Any, Any]]:
    """(node, inspect's placement, validate's placement) wherever the two differ."""
    a = inspect(name).doc
    b = validate(name, with_inputs=True).doc
    if a is None or b is None:
        return [("<no JSON document>", a is not None, b is not None)]
    pa, pb = placements(a), placements(b)
    return [(n, pa.get(n), pb.get(n)) for n in sorted(set(pa) | set(pb)) if pa.get(n) != pb.get(n)]


@dataclass(frozen=True)
class ModelResult:
    name: str
    validate_inputs: CliRun
    validate_random: CliRun
    inspect: CliRun
    shape_unknown: Sequence[str]
    shape_unknown_rank_known: Sequence[str]
    placement_disagreements: Sequence[tuple[str, Any, Any]]


def result(name: str) -> ModelResult:
    doc = inspect(name).doc or {}
    unknown = shape_unknown_nodes(doc)
    ranked = rank_known_nodes(name)
    return ModelResult(
        name=name,
        validate_inputs=validate(name, with_inputs=True),
        validate_random=validate(name, with_inputs=False),
        inspect=inspect(name),
        shape_unknown=unknown,
        shape_unknown_rank_known=[n for n in unknown if n in ranked],
        placement_disagreements=placement_disagreements(name),
    )
