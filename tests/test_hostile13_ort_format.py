"""hostile13: ORT-format (``.ort``) models with the session options that mean something to onnxruntime.

Found: an ``.ort`` model ran on a copy of the caller's options, so ``add_initializer`` values were
silently ignored (the model's own weights were used: wrong values), ``enable_profiling`` wrote no profile
(``end_profiling()`` returned ""), and ``optimized_model_filepath`` wrote nothing. Expected values:
onnxruntime's CPU session of the same file with the same options (``intra_op_num_threads=1``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError

from .oracle import IR_VERSION

FEEDS = {"i": np.array([3, -1], np.int64)}


@pytest.fixture(scope="module")
def ort_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("h13ort")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        "h13ort",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "d")],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(folder / "model.ort")  # onnxruntime writes its ORT format by the ending
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return folder / "model.ort"


def _options(**settings: Any) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    for name, value in settings.items():
        setattr(so, name, value)
    return so


@pytest.mark.parametrize("named", ["model.ort", "model_ort.onnx"])
def test_add_initializer_on_an_ort_model_is_read_on_every_run(ort_file: Path, named: str) -> None:
    """Named ``.ort``, or ``.onnx`` with ``session.load_model_format = ORT`` (the probe dmlshim asks
    onnxruntime with must then be an ORT-format model too)."""
    path = ort_file.parent / named
    if not path.exists():
        shutil.copy(ort_file, path)
    results = []
    for make in (
        lambda so: ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]),
        lambda so: dmlshim.InferenceSession(str(path), so),
    ):
        value = ort.OrtValue.ortvalue_from_numpy(np.full((4, 3), 7, np.float32))
        so = _options()
        if named.endswith(".onnx"):
            so.add_session_config_entry("session.load_model_format", "ORT")
        so.add_initializer("d", value)
        session = make(so)
        first = session.run(None, FEEDS)[0]
        value.update_inplace(np.full((4, 3), -2, np.float32))
        results.append((first, session.run(None, FEEDS)[0]))
    (want1, want2), (got1, got2) = results
    assert want1.ravel().tolist() == [7.0] * 6 and want2.ravel().tolist() == [-2.0] * 6
    assert got1.tobytes() == want1.tobytes() and got2.tobytes() == want2.tobytes()


def test_profiling_an_ort_model_writes_a_profile(ort_file: Path, tmp_path: Path) -> None:
    so = _options(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    session = dmlshim.InferenceSession(str(ort_file), so)
    session.run(None, FEEDS)
    written = session.end_profiling()
    assert written and os.path.isfile(written) and Path(written).parent == tmp_path


def test_optimized_model_filepath_of_an_ort_model(ort_file: Path, tmp_path: Path) -> None:
    """Written as onnxruntime writes it (the graph the ``.ort`` file holds); the ``.ort`` file itself is
    refused as the target (onnxruntime would replace the program's model with it)."""
    target = tmp_path / "optimized.onnx"
    dmlshim.InferenceSession(str(ort_file), _options(optimized_model_filepath=str(target)))
    written = onnx.load(str(target))
    assert [n.op_type for n in written.graph.node] == ["Gather"]
    assert ort.InferenceSession(str(target), providers=["CPUExecutionProvider"]).run(None, FEEDS)[
        0
    ].tolist() == [
        [9.0, 10.0, 11.0],
        [9.0, 10.0, 11.0],
    ]
    own = tmp_path / "own.ort"
    shutil.copy(ort_file, own)
    before = own.read_bytes()
    with pytest.raises(BadInputError, match="refusing to replace an input"):
        dmlshim.InferenceSession(str(own), _options(optimized_model_filepath=str(own)))
    assert own.read_bytes() == before
