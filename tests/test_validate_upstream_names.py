"""Issue 37 (held-out models): a Keypoint R-CNN output that differs has 300-odd gather/scatter nodes
upstream, and the text report named every one on one line per output. It now names the first 12, says
how many there are, and points to ``--json``, which keeps them all.

The model is a chain of 14 Gathers whose DirectML kernel is planted to read one element off, so the
output differs from onnxruntime's (the reference: onnxruntime CPU, single-threaded).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim.cli.main import main
from dmlshim.dml.operators import GatherDesc
from dmlshim.kernels import _KERNELS, KernelOptions, KernelResult
from dmlshim.text import names_text
from tests.oracle import IR_VERSION, ort_run

CHAIN = 14


def _chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x[8] gathered 14 times through a permutation: each Gather reads the previous one's output."""
    perm = helper.make_tensor("perm", TensorProto.INT64, [8], [3, 0, 7, 1, 6, 2, 5, 4])
    nodes = []
    value = "x"
    for i in range(CHAIN):
        out = "y" if i == CHAIN - 1 else f"g{i}_out"
        nodes.append(helper.make_node("Gather", [value, "perm"], [out], axis=0, name=f"g{i}"))
        value = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
        [perm],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    return model, {"x": np.arange(8, dtype=np.float32) * 1.5}


def _plant(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _KERNELS[GatherDesc]

    def faulty(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        shifted = np.roll(result.output.reshape(-1), 1).reshape(result.output.shape)
        return KernelResult(np.ascontiguousarray(shifted), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, GatherDesc, faulty)


def test_names_text_counts_what_it_leaves_out() -> None:
    assert names_text(["a", "b", "c"], 3) == "a, b, c"
    assert names_text(["a", "b", "c", "d", "e"], 3) == "a, b, c and 2 more"
    assert names_text(["a", "b"], 3, quote=True) == "'a', 'b'"
    assert names_text([], 3) == ""


def test_a_long_upstream_list_is_cut_in_text_and_whole_in_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], numpy_kernels: None
) -> None:
    model, feeds = _chain()
    (expected,) = ort_run(model, feeds)
    # onnxruntime's answer: the permutation applied 14 times (so the planted kernel must differ from it).
    want = feeds["x"]
    for _ in range(CHAIN):
        want = want[[3, 0, 7, 1, 6, 2, 5, 4]]
    np.testing.assert_array_equal(expected, want)
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", **feeds)
    _plant(monkeypatch)
    code = main(["validate", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "m.npz")])
    text, _ = capsys.readouterr()
    assert code == 1
    (line,) = [ln for ln in text.splitlines() if "gather/scatter nodes upstream" in ln]
    named = ", ".join(f"g{i}" for i in range(12))
    assert line == f"  gather/scatter nodes upstream (14): {named} and 2 more (--json lists them all)"
    code = main(["validate", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "m.npz"), "--json"])
    doc = json.loads(capsys.readouterr()[0])
    assert code == 1
    (out,) = [o for o in doc["outputs"] if o["name"] == "y"]
    assert out["upstream_nodes"] == [f"g{i}" for i in range(CHAIN)]
