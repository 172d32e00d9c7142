"""Hostile round 49b: ``optimized_model_external_initializers_file_name`` naming a file in a subfolder of
the optimized model's folder (``sub/w.bin``). onnxruntime writes it there when the folder exists (dmlshim
failed: its staging folder lacked ``sub``), fails when it does not, and writes through ``sub`` when it is
a symbolic link (replacing a file of the link's target), which dmlshim refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

EXTERNAL_FILE = "session.optimized_model_external_initializers_file_name"
MIN_SIZE = "session.optimized_model_external_initializers_min_size_in_bytes"


def _model(path: Path) -> Path:
    weights = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "W")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "idx"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [weights],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _options(module: object, target: Path, weights: str) -> object:
    so = module.SessionOptions()  # type: ignore[attr-defined]
    so.optimized_model_filepath = str(target)
    so.add_session_config_entry(EXTERNAL_FILE, weights)
    so.add_session_config_entry(MIN_SIZE, "16")
    return so


def test_weights_in_an_existing_subfolder_are_written_as_onnxruntime_writes_them(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    for name in ("ort", "dml"):
        (tmp_path / name / "sub").mkdir(parents=True)
    onnxruntime.InferenceSession(
        str(model),
        _options(onnxruntime, tmp_path / "ort" / "opt.onnx", "sub/w.bin"),
        providers=["CPUExecutionProvider"],
    )
    dmlshim.InferenceSession(str(model), _options(onnxruntime, tmp_path / "dml" / "opt.onnx", "sub/w.bin"))
    assert (tmp_path / "dml" / "sub" / "w.bin").read_bytes() == (
        tmp_path / "ort" / "sub" / "w.bin"
    ).read_bytes()
    idx = np.array([3, -1, 0], dtype=np.int64)
    expected = onnxruntime.InferenceSession(str(tmp_path / "ort" / "opt.onnx")).run(None, {"idx": idx})[0]
    got = onnxruntime.InferenceSession(str(tmp_path / "dml" / "opt.onnx")).run(None, {"idx": idx})[0]
    np.testing.assert_array_equal(got, expected)
    assert sorted(p.name for p in (tmp_path / "dml").rglob("*")) == ["opt.onnx", "sub", "w.bin"]


def test_missing_subfolder_fails_as_in_onnxruntime(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    (tmp_path / "dml").mkdir()
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="external_stream"):
        dmlshim.InferenceSession(
            str(model), _options(onnxruntime, tmp_path / "dml" / "opt.onnx", "sub/w.bin")
        )
    assert list((tmp_path / "dml").iterdir()) == []


def test_linked_subfolder_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "w.bin").write_bytes(b"precious")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sub").symlink_to(tmp_path / "user", target_is_directory=True)
    with pytest.raises(RuntimeError, match="through the symbolic link") as caught:
        dmlshim.InferenceSession(
            str(model), _options(onnxruntime, tmp_path / "out" / "opt.onnx", "sub/w.bin")
        )
    assert isinstance(caught.value, dmlshim.BadInputError)
    assert (tmp_path / "user" / "w.bin").read_bytes() == b"precious"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sub"]
