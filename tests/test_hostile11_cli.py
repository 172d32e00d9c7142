"""Hostile round 11 (issue 35 item 6): the CLI commands on odd models.

An indices input with no elements, feeding an axis of size 0 (``GatherElements`` of a ``[2, 0]`` data
tensor): onnxruntime runs the model (its output is empty), so ``run``, ``validate`` and ``export``
without ``--inputs`` must generate inputs for it too; they refused it ("no value is a valid index"),
although an empty tensor holds no index at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from .oracle import IR_VERSION, ort_run


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _model(op: str, data_shape: list[int], indices_shape: list[int], **attrs: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["d", "i"], ["y"], name="g", **attrs)],
        "h11",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, data_shape),
            helper.make_tensor_value_info("i", TensorProto.INT64, indices_shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])


CASES = {
    "gather_elements_empty_axis": ("GatherElements", [2, 0], [2, 0], {"axis": 1}),
    "gather_empty_axis": ("Gather", [0, 3], [0], {"axis": 0}),
    "gathernd_empty_dim": ("GatherND", [0, 3], [0, 1], {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_empty_indices_into_an_empty_axis_are_generated(tmp_path: Path, case: str) -> None:
    op, data_shape, indices_shape, attrs = CASES[case]
    model = _model(op, data_shape, indices_shape, **attrs)
    onnx.save(model, tmp_path / "m.onnx")
    feeds = {"d": np.zeros(data_shape, np.float32), "i": np.zeros(indices_shape, np.int64)}
    (expected,) = ort_run(model, feeds)  # onnxruntime runs it: an empty output
    ran = _cli(["run", "-q", "m.onnx", "-o", "out.npz"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "out.npz") as out:
        got = out["y"]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    for engine in ("partitioned", "customop"):
        checked = _cli(["validate", "-q", "m.onnx", "--engine", engine], tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    exported = _cli(["export", "-q", "m.onnx", "-o", "exp"], tmp_path)
    assert exported.returncode == 0, exported.stderr
