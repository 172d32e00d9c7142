"""Hostile pass h49 on the surfaces of issues 33-37: inspect --inputs, the compiled kernels' switch, the
drop-in runner's ``-m MODULE``. Expected values come from onnxruntime CPU (one thread) or from python
itself (``python -m``'s own refusal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.fuzz_settings import run_cli
from tests.oracle import ort_run


def _constant_and_fed_gathers() -> onnx.ModelProto:
    """A Gather reading only initializers (a rank-0 negative index) beside a Gather of a fed index."""
    w = np.arange(42, dtype=np.float32).reshape(7, 6)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["W", "k"], ["row"], axis=0, name="constant_gather"),
            helper.make_node("Gather", ["W", "i"], ["cols"], axis=-1, name="fed_gather"),
        ],
        "h49",
        [helper.make_tensor_value_info("i", TensorProto.INT32, ["N", 3])],
        [
            helper.make_tensor_value_info("row", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("cols", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(-2, np.int64), "k")],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


_FEEDS = {"i": np.array([[0, -1, 4], [-6, 2, 2]], np.int32)}


def test_inspect_inputs_counts_a_gather_of_initializers_as_such(tmp_path: Path) -> None:
    model = _constant_and_fed_gathers()
    path, inputs = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, path)
    np.savez(inputs, **_FEEDS)
    res = run_cli("inspect", "-q", path, "--inputs", inputs)
    assert "Traceback" not in res.err
    shapes = next(line for line in res.out.splitlines() if line.startswith("Shapes:"))
    # no control flow in this model: the node that reads only initializers is named for what it is
    assert "inside control flow" not in shapes, shapes
    assert "1 of 2 gather/scatter nodes translated at the shapes of a run" in shapes, shapes
    assert "1 reading only initializers" in shapes, shapes
    # and both nodes give onnxruntime's values
    ours = dmlshim.InferenceSession(model.SerializeToString()).run(None, _FEEDS)
    for got, want in zip(ours, ort_run(model, _FEEDS), strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def _script(tmp_path: Path, model: onnx.ModelProto) -> Path:
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "i.npy", _FEEDS["i"])
    script = tmp_path / "go.py"
    script.write_text(
        "import logging, sys, numpy as np, dmlshim\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "s = dmlshim.InferenceSession(sys.argv[1])\n"
        "out = s.run(None, {'i': np.load(sys.argv[2])})\n"
        "np.savez(sys.argv[3], row=out[0], cols=out[1])\n"
    )
    return script


def test_a_bad_dmlshim_kernels_value_is_reported_through_logging_set_up_after_import(tmp_path: Path) -> None:
    """The value was read (and its warning logged) at import, before any caller (the CLI included) had
    set logging up: the warning was lost and the typo went unnoticed."""
    model = _constant_and_fed_gathers()
    script = _script(tmp_path, model)
    env = {**os.environ, "DMLSHIM_KERNELS": "fast"}
    res = subprocess.run(
        [sys.executable, script, tmp_path / "m.onnx", tmp_path / "i.npy", tmp_path / "o.npz"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "ignoring DMLSHIM_KERNELS='fast'" in res.stderr, res.stderr
    got = np.load(tmp_path / "o.npz")
    want = ort_run(model, _FEEDS)
    np.testing.assert_array_equal(got["row"], want[0])
    np.testing.assert_array_equal(got["cols"], want[1])


def test_a_bad_dmlshim_kernels_value_is_reported_by_the_cli(tmp_path: Path) -> None:
    model = _constant_and_fed_gathers()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", **_FEEDS)
    env = {**os.environ, "DMLSHIM_KERNELS": "numbaa"}
    res = subprocess.run(
        [sys.executable, "-m", "dmlshim", "run", "-q", tmp_path / "m.onnx", "--inputs", tmp_path / "in.npz",
         "-o", tmp_path / "out.npz"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "ignoring DMLSHIM_KERNELS='numbaa'" in res.stderr, res.stderr
    got = np.load(tmp_path / "out.npz")
    want = ort_run(model, _FEEDS)
    np.testing.assert_array_equal(got["row"], want[0])
    np.testing.assert_array_equal(got["cols"], want[1])


@pytest.mark.parametrize("module", ["no_such_module_h49", "json", "json.no_such_h49"])
def test_dropin_runner_refuses_a_missing_module_as_python_does(module: str, tmp_path: Path) -> None:
    """``python -m dmlshim.ort -m X`` where ``python -m X`` cannot start: python's own line and exit
    code, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT")}
    theirs = subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, timeout=120, check=False,
        stdin=subprocess.DEVNULL, cwd=tmp_path, env=env,
    )  # fmt: skip
    ours = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "--summary", "off", "-m", module],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL, cwd=tmp_path,
        env=env,
    )  # fmt: skip
    assert theirs.returncode == 1, theirs.stderr
    assert ours.returncode == theirs.returncode, ours.stderr
    assert "Traceback" not in ours.stderr, ours.stderr
    assert ours.stderr.strip() == theirs.stderr.strip()
