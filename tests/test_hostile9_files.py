"""hostile9: files dmlshim writes for a session (optimized_model_filepath and its external initializers)
never land outside the target's folder, not even while onnxruntime writes them in a staging folder."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError
from tests.oracle import IR_VERSION

KEY = "session.optimized_model_external_initializers_file_name"


def _model_file(folder: Path) -> Path:
    weights = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(1024, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["y"], axis=0)],
        "h9",
        [helper.make_tensor_value_info("idx", T.INT64, [3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [3, 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("name", ["../victim.bin", "../../victim.bin", "/victim.bin"])
def test_an_external_initializers_name_leaving_the_folder_writes_nothing_outside(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name was checked only after onnxruntime had written the optimized model into a staging folder
    under the temporary directory: '../victim.bin' had already replaced a file of that name in the
    temporary directory (a file the user owns, nothing to do with the target) before the refusal."""
    temp = tmp_path / "tmp" / "inner"
    temp.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    victims = [temp / "victim.bin", temp.parent / "victim.bin"]
    for victim in victims:
        victim.write_bytes(b"precious")
    (tmp_path / "out").mkdir()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "out" / "opt.onnx")
    so.add_session_config_entry(KEY, name if not name.startswith("/") else str(temp) + name)
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "100")
    with pytest.raises(BadInputError):
        dmlshim.InferenceSession(str(_model_file(tmp_path)), so)
    assert [v.read_bytes() for v in victims] == [b"precious"] * 2
    assert not (tmp_path / "out" / "opt.onnx").exists()


@pytest.mark.parametrize(
    "flags",
    [
        ["--save-inputs", "a.npz", "--save-outputs", "a.npz"],
        ["--save-outputs", "a.npz", "--html", "./a.npz", "--overwrite"],
        ["--save-inputs", "sub/../a.npz", "--save-outputs", "a.npz", "--overwrite"],
    ],
)
def test_validate_refuses_two_of_its_files_at_one_path_before_the_run(
    flags: list[str], tmp_path: Path
) -> None:
    """validate wrote the first file, then refused the second (without --overwrite: exit 2 with half the
    files written) or replaced its own first file with it (with --overwrite: the outputs asked for were
    gone, an HTML page in their place)."""
    model = _model_file(tmp_path)
    (tmp_path / "sub").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "validate", str(model), "-q", *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "same file" in done.stderr, done.stderr
    assert not (tmp_path / "a.npz").exists()
