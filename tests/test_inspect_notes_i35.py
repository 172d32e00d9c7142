"""``dmlshim inspect`` says what the ``SIZES_SYMBOLIC`` note means once per model, not once per node: the
text groups the nodes by the symbolic dimensions their sizes follow, and ``--json`` keeps each node's note
(its value: those dimensions) with the meaning once, in the top-level ``notes``.

Expected values: the dimension names the test models declare (``batch``, ``n``), and node counts the
models are built with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto as T
from onnx import helper, save

from dmlshim.cli.main import main as cli
from dmlshim.translate.translator import SIZES_SYMBOLIC_MEANING
from tests.oracle import IR_VERSION


def _chain(tmp_path: Path, count: int) -> Path:
    """x [batch, 8] gathered by i [n] (node g0: sizes follow batch and n), then ``count - 1`` Gathers of
    the [n, 8] result by the static j [8] along axis 1 (nodes g1, g2, ...: sizes follow n only)."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["t0"], name="g0", axis=0)]
    for k in range(1, count):
        nodes.append(helper.make_node("Gather", [f"t{k - 1}", "j"], [f"t{k}"], name=f"g{k}", axis=1))
    graph = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", T.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("i", T.INT64, ["n"]),
            helper.make_tensor_value_info("j", T.INT64, [8]),
        ],
        [helper.make_tensor_value_info(f"t{count - 1}", T.FLOAT, None)],
    )
    path = tmp_path / f"chain{count}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), path)
    return path


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli(["inspect", *argv]) == 0
    return capsys.readouterr().out


def test_the_meaning_is_said_once_and_every_node_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _chain(tmp_path, 4)
    out = _inspect(capsys, str(path))
    assert out.count(SIZES_SYMBOLIC_MEANING) == 1
    assert out.count("SIZES_SYMBOLIC") == 1  # the count line; no per-node [note] lines under Details
    assert "  SIZES_SYMBOLIC: 4\n" in out
    assert "    dimensions batch, n: g0\n" in out and "    dimensions n: g1, g2, g3\n" in out
    assert "Details:" not in out  # nothing else to say per node
    doc = json.loads(_inspect(capsys, str(path), "--json"))
    assert doc["notes"] == {"SIZES_SYMBOLIC": SIZES_SYMBOLIC_MEANING}
    notes = {n["name"]: [r for r in n["reasons"] if r["code"] == "SIZES_SYMBOLIC"] for n in doc["nodes"]}
    assert {name: [r["value"] for r in rs] for name, rs in notes.items()} == {
        "g0": [["batch", "n"]],
        "g1": [["n"]],
        "g2": [["n"]],
        "g3": [["n"]],
    }
    assert all(SIZES_SYMBOLIC_MEANING not in r["message"] for rs in notes.values() for r in rs)
    assert doc["summary"]["notes"] == {"SIZES_SYMBOLIC": 4}


def test_many_nodes_stay_a_few_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _inspect(capsys, str(_chain(tmp_path, 300)))
    assert out.count(SIZES_SYMBOLIC_MEANING) == 1
    assert "    dimensions n: g1, g2, g3, g4, g5, g6 and 293 more\n" in out
    # the report grows by the node table's row per node, not by a paragraph per node
    assert len(out.encode()) < 300 * 80


def test_static_shapes_have_no_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shapes = (str(_chain(tmp_path, 2)), "--input-shape", "batch=3", "--input-shape", "n=2")
    doc = json.loads(_inspect(capsys, *shapes, "--json"))
    assert "notes" not in doc and doc["summary"]["notes"] == {}
    assert "Notes on translated nodes" not in _inspect(capsys, *shapes)
