"""hostile47: external-data entries onnxruntime accepts or refuses, in every engine: an offset without a
length, an offset not aligned to the element size (onnxruntime reads the bytes there), ``./w.bin``;
``..``, an absolute path, a link or a folder link leading out of the model's folder, a location that is a
folder, an offset or length past the file's end, a duplicated ``location`` key. dmlshim accepts exactly
what onnxruntime accepts, with its values bit for bit. All held when tried; kept as tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from tests.oracle import IR_VERSION

DATA = np.arange(64, dtype=np.float32)


def _model(folder: Path, location: str, extra: list[tuple[str, str]]) -> Path:
    weights = onnx.TensorProto(name="w", data_type=T.FLOAT, dims=[8, 4], data_location=T.EXTERNAL)
    for key, value in [("location", location), *extra]:
        entry = weights.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="gather")],
        "h47",
        [helper.make_tensor_value_info("i", T.INT64, [None])],
        [helper.make_tensor_value_info("y", T.FLOAT, [None, 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    path = folder / "m.onnx"
    onnx.save(model, path)
    return path


CASES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "offset_without_length": ("w.bin", [("offset", "4")]),
    "unaligned_offset": ("w.bin", [("offset", "3"), ("length", "128")]),
    "dot_slash": ("./w.bin", []),
    "dot_dot": ("../outside.bin", []),
    "absolute": ("ABSOLUTE", []),
    "link_out": ("link.bin", []),
    "folder_link_out": ("up/outside.bin", []),
    "location_is_a_folder": ("sub", []),
    "offset_past_the_end": ("w.bin", [("offset", "200"), ("length", "128")]),
    "length_past_the_end": ("w.bin", [("offset", "0"), ("length", "1000")]),
    "location_twice": ("w.bin", [("offset", "0"), ("length", "128"), ("location", "other.bin")]),
}


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_external_data_as_onnxruntime_takes_it(tmp_path: Path, case: str, engine: str) -> None:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    DATA.tofile(folder / "w.bin")
    DATA.tofile(tmp_path / "outside.bin")
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    os.symlink(tmp_path, folder / "up")
    location, extra = CASES[case]
    if location == "ABSOLUTE":
        location = str(folder / "w.bin")
    path = _model(folder, location, extra)
    feeds = {"i": np.array([1, 0])}
    try:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception:
        with pytest.raises(dmlshim.DmlShimError):
            dmlshim.InferenceSession(str(path), engine=engine).run(None, feeds)
        return
    session = dmlshim.InferenceSession(str(path), engine=engine)
    for _ in range(4):
        got = session.run(None, feeds)
        assert got[0].tobytes() == want[0].tobytes()
