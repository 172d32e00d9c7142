"""Weights read by onnxruntime from the model's own files: the slices found by walking the .onnx file's wire
format, sessions whose large initializers point there, outputs equal to onnxruntime's, and the arrays
handed instead when the file changed after loading."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import dmlshim
from dmlshim.execute.weights.file_slices import weight_slices
from dmlshim.execute.weights.shared import PLACEHOLDER_LOCATION, SharedWeights
from tests.oracle import ort_run
from tests.test_engine_weights import _model


def _save(model: onnx.ModelProto, folder: Path, external: bool) -> Path:
    path = folder / "weights.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving as external data moves the bytes out of the proto saved
    onnx.save_model(
        copy,
        str(path),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=1024,
    )
    return path


@pytest.mark.parametrize("external", [False, True])
def test_slices_hold_the_initializers_bytes(tmp_path: Path, external: bool) -> None:
    model, _ = _model()
    path = _save(model, tmp_path, external)
    slices = weight_slices(path)
    assert set(slices) == {"table", "weight"}
    for tensor in model.graph.initializer:
        where = slices[tensor.name]
        assert where.location == ("weights.bin" if external else "weights.onnx")
        with open(tmp_path / where.location, "rb") as f:
            f.seek(where.offset)
            assert f.read(where.length) == tensor.raw_data  # the bytes onnx wrote, found without parsing


def test_a_file_that_is_no_model_gives_no_slices(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")  # field 7, a varint that never ends
    assert weight_slices(path) == {}


@pytest.mark.parametrize("external", [False, True])
def test_sessions_read_weights_from_the_file_with_outputs_of_onnxruntime(
    tmp_path: Path, external: bool
) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external)
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(str(path))
    for _ in range(8):  # through the trial: both the whole-model check and the partitioned steps
        got = session.run(None, feeds)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and np.array_equal(g, e)
    loaded = onnx.load(str(path))
    shared = SharedWeights({t.name: t for t in loaded.graph.initializer}, model_path=str(path))
    stub = shared.stub(loaded.graph.initializer[1])
    # a weight held in the model is handed as an array: a reference into the user's file would make the
    # file a live dependency of the session (onnxruntime maps what it reads from files)
    assert {e.key: e.value for e in stub.external_data}["location"] == PLACEHOLDER_LOCATION


def test_a_changed_file_gets_arrays_instead(tmp_path: Path) -> None:
    model, _ = _model()
    path = _save(model, tmp_path, external=False)
    loaded = onnx.load(str(path))
    shared = SharedWeights({t.name: t for t in loaded.graph.initializer}, model_path=str(path))
    with open(path, "ab") as f:
        f.write(b"\0")  # the file is no longer the one read
    os.utime(path, ns=(1, 1))
    stub = shared.stub(loaded.graph.initializer[1])
    assert {e.key: e.value for e in stub.external_data}["location"] == PLACEHOLDER_LOCATION
