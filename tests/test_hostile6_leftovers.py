"""Hostile pass h6 (issue 35), the known leftovers: the custom-op engine's out-of-range error in ONNX terms,
.npz files with many members, control characters in names on every text output, small external weights
edited or driving shapes after the session is built. Expected values and refusals are onnxruntime CPU's
(one thread), asked in the same test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

import dmlshim
from dmlshim.errors import BadModelError, IndexOutOfRangeError
from tests.oracle import ort_session

ENGINES = ("partitioned", "customop", "cpu")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _gather(node_name: str, input_name: str, output_name: str, weight: str = "W") -> onnx.ModelProto:
    x = helper.make_tensor_value_info(input_name, TensorProto.INT64, [2, 2])
    y = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [2, 2, 3])
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), weight)
    node = helper.make_node("Gather", [weight, input_name], [output_name], name=node_name)
    graph = helper.make_graph([node], "h6", [x], [y], [table])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("engine", ENGINES)
def test_out_of_range_error_names_the_onnx_node_op_tensor_and_position(engine: str) -> None:
    model = _gather("my_gather", "ids", "y").SerializeToString()
    feeds = {"ids": np.array([[0, 1], [2, 9]], np.int64)}
    with pytest.raises(Exception) as theirs:
        ort_session(model).run(None, feeds)
    assert "idx=9" in str(theirs.value)
    with pytest.raises(IndexOutOfRangeError) as ours:
        dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
    err = ours.value
    assert (err.node, err.op_type, err.tensor, err.value) == ("my_gather", "Gather", "ids", 9)
    if engine != "cpu":  # the cpu engine carries onnxruntime's own message, which has no position
        assert tuple(err.position) == (1, 1)
        assert "index 9 at ids[1, 1]" in str(err) and "DML_OPERATOR_GATHER" in str(err)


def test_npz_with_many_members_parses_each_header_once(tmp_path: Path, monkeypatch) -> None:
    from dmlshim.fileio import npz

    arrays = {f"a{i}": np.full((2,), i, np.float32) for i in range(300)}
    arrays["fortran"] = np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3))
    arrays["empty"] = np.zeros((0, 3), np.int64)
    np.savez(tmp_path / "many.npz", **arrays)
    calls = []
    real = npz.npy_header
    monkeypatch.setattr(npz, "npy_header", lambda s: calls.append(1) or real(s))
    loaded = npz.load_npz(tmp_path / "many.npz")
    assert len(calls) == len(arrays)
    reference = dict(np.load(tmp_path / "many.npz"))
    assert loaded.keys() == reference.keys()
    for key, value in reference.items():
        assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape
        np.testing.assert_array_equal(loaded[key], value)
        assert loaded[key].flags.writeable
    assert loaded["fortran"].flags.f_contiguous


_NODE = "gat\rher\x07\x1b[31m"
_INPUT = "ids\nverdict: MATCH\x1b[2J"
_OUTPUT = "out\nFAKE LINE\u2028x"


def _evil(tmp_path: Path) -> Path:
    path = tmp_path / "evil.onnx"
    onnx.save(_gather(_NODE, _INPUT, _OUTPUT, weight="W\nx"), path)
    np.savez(tmp_path / "bad.npz", **{_INPUT: np.array([[0, 1], [2, 9]], np.int64)})
    np.savez(tmp_path / "wrong.npz", **{_INPUT: np.zeros((2, 2), np.float32), "zz\n\x1b[1m": np.ones(1)})
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dmlshim", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "evil.onnx", "--inputs", "bad.npz", "-o", "o.npz"),
        ("run", "evil.onnx", "--inputs", "bad.npz", "-o", "o.npz", "--engine", "customop"),
        ("validate", "evil.onnx", "--inputs", "wrong.npz"),
        ("run", "evil.onnx", "--input-shape", "ids\nverdict=3", "-o", "o.npz"),
    ],
)
def test_cli_errors_escape_control_characters_in_names(args: tuple[str, ...], tmp_path: Path) -> None:
    _evil(tmp_path)
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert not _CONTROL.search(done.stderr), done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and error_lines[0].startswith(f"dmlshim {args[0]}: error:"), done.stderr


def test_html_report_has_no_raw_control_characters(tmp_path: Path) -> None:
    pytest.importorskip("igraph")
    _evil(tmp_path)
    done = _cli("inspect", "evil.onnx", "--html", "r.html", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert not _CONTROL.search(page)
    assert "gat\\rher\\x07\\x1b[31m" in page  # shown escaped, as in the text report
    assert 'data-name="gat&#xd;her&#x7;&#x1b;[31m"' in page  # the name itself, for #select= links


def test_dropin_summary_escapes_names(tmp_path: Path) -> None:
    _evil(tmp_path)
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, numpy as np, onnxruntime as ort\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['DmlExecutionProvider'])\n"
        "name = s.get_inputs()[0].name\n"
        "s.run(None, {name: np.array([[0, 1], [2, 3]])})\n"
        "try:\n    s.run(None, {name: np.array([[0, 1], [2, 9]])})\nexcept Exception:\n    pass\n"
    )
    cmd = [sys.executable, "-m", "dmlshim.ort", str(script), "evil.onnx"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = done.stderr[done.stderr.index("dmlshim (DirectML emulated") :]
    assert not _CONTROL.search(summary), summary
    assert "gat\\rher\\x07\\x1b[31m" in summary and "1 run(s) raised" in summary


def _external(folder: Path, model: onnx.ModelProto) -> str:
    convert_model_to_external_data(model, location="w.bin", size_threshold=0)
    onnx.save(model, folder / "m.onnx")
    return str(folder / "m.onnx")


@pytest.mark.parametrize("engine", ENGINES)
def test_small_external_tensor_driving_a_shape_is_refused_as_onnxruntime_refuses(
    engine: str, tmp_path: Path
) -> None:
    """onnxruntime cannot infer shapes from a 16-byte external Reshape shape and refuses the model;
    dmlshim read weights under 1 KiB into the model and accepted it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "S")
    nodes = [
        helper.make_node("Reshape", ["x", "S"], ["r"], name="rs"),
        helper.make_node("Gather", ["r", "I"], ["y"], name="g"),
    ]
    idx = numpy_helper.from_array(np.array([2, 0], np.int64), "I")
    graph = helper.make_graph(nodes, "h6", [x], [y], [shape, idx])
    path = _external(
        tmp_path, helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    )
    with pytest.raises(Exception, match="Cannot parse data from external tensors") as theirs:
        ort_session(path)
    assert "tensor: S" in str(theirs.value)
    with pytest.raises(BadModelError, match="Cannot parse data from external tensors"):
        dmlshim.InferenceSession(path, engine=engine)


@pytest.mark.parametrize("level", ["default", "disabled"])
@pytest.mark.parametrize("engine", ENGINES)
def test_small_external_constant_indices_edited_after_load_follow_onnxruntime(
    engine: str, level: str, tmp_path: Path
) -> None:
    """16- and 24-byte external index tensors: onnxruntime reads the edit at its next run (an index made
    out of range by the edit is refused at that run)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")]
    nodes = [
        helper.make_node("Gather", ["x", "I"], ["y"], name="g", axis=0),
        helper.make_node("GatherElements", ["x", "I2"], ["z"], name="ge", axis=1),
    ]
    inits = [
        numpy_helper.from_array(np.array([2, 0], np.int64), "I"),
        numpy_helper.from_array(np.array([[3], [0], [1]], np.int64), "I2"),
    ]
    graph = helper.make_graph(nodes, "h6", [x], outs, inits)
    path = _external(
        tmp_path, helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    )
    optimization = {
        "default": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "disabled": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[level]
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = optimization
    ref = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ours_so = dmlshim.SessionOptions()
    ours_so.graph_optimization_level = optimization
    ours = dmlshim.InferenceSession(path, ours_so, engine=engine)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    for a, b in zip(ours.run(None, feeds), ref.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    with open(tmp_path / "w.bin", "r+b") as f:
        f.write(np.array([1, 1, 2, 2, 2], np.int64).tobytes())
    want = ref.run(None, feeds)
    assert want[0].tolist() == [[4, 5, 6, 7]] * 2  # the edit shows in onnxruntime
    for a, b in zip(ours.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(a, b)
    with open(tmp_path / "w.bin", "r+b") as f:
        f.write(np.array([7], np.int64).tobytes())
    with pytest.raises(Exception, match="idx=7"):
        ref.run(None, feeds)
    with pytest.raises(IndexOutOfRangeError) as info:
        ours.run(None, feeds)
    assert info.value.node == "g" and info.value.value == 7
