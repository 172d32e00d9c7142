"""Hostile round 50 (issue 35): external-data locations that resolve to a file but name none as written.

``w.bin/`` and ``w.bin/.`` resolve (``os.path.realpath``) to the regular file ``w.bin``, so the model
check passed them; the partitioned engine then failed mapping the weights with ``NoSuchFile`` ("Not a
directory"), the other engines with onnxruntime's own refusal. onnxruntime opens the location as written
and refuses the model (1.32: ``Fail``, "External data path validation failed"; 1.24: its
``RuntimeException``, "cannot get file size: Not a directory"). Every engine now refuses it at creation
with onnxruntime's class, naming the initializer and the location; tricks onnxruntime accepts
(``./w.bin``, ``sub/../w.bin``, a misaligned offset, two initializers over the same bytes) give its values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadModelError

ENGINES = ("partitioned", "customop", "cpu")


def _external(name: str, dims: list[int], location: str, offset: int, length: int | None) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    entries = [("location", location), ("offset", str(offset))] + (
        [("length", str(length))] if length else []
    )
    for key, value in entries:
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _write(folder: Path, tensors: list[TensorProto], nodes: list[onnx.NodeProto], outputs: list[str]) -> str:
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "w.bin").write_bytes(b"\x07" + np.arange(100, dtype=np.float32).tobytes())  # 1 byte off
    graph = helper.make_graph(
        nodes,
        "h50",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        tensors,
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]), path)
    return str(path)


def _reference(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | Exception:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    try:
        return onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as exc:
        return exc


@pytest.mark.parametrize("location", ["w.bin/", "w.bin/.", "sub/../w.bin/"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_location_naming_no_file_as_written_is_refused_as_onnxruntime_refuses(
    tmp_path: Path, engine: str, location: str
) -> None:
    path = _write(tmp_path, [_external("W", [4, 3], location, 1, 48)],
                  [helper.make_node("Gather", ["W", "i"], ["y"], name="g")], ["y"])  # fmt: skip
    want = _reference(path, {"i": np.array([1, 2], np.int64)})
    assert isinstance(want, Exception), want
    with pytest.raises(BadModelError) as caught:
        dmlshim.InferenceSession(path, engine=engine)
    assert isinstance(caught.value, type(want)), (type(caught.value).__mro__, type(want))
    assert "'W'" in str(caught.value) and repr(location) in str(caught.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_locations_and_offsets_onnxruntime_accepts_give_its_values(tmp_path: Path, engine: str) -> None:
    tensors = [
        _external("W", [4, 3], "w.bin", 1, 48),
        _external("W2", [4, 3], "./w.bin", 9, 48),  # overlaps W, another spelling
        _external("W3", [2, 3], "sub/../w.bin", 5, None),
    ]
    nodes = [
        helper.make_node("Gather", ["W", "i"], ["y"], name="g1"),
        helper.make_node("Gather", ["W2", "i"], ["y2"], name="g2", axis=1),
        helper.make_node("GatherElements", ["W3", "j"], ["y3"], name="g3", axis=0),
    ]
    path = _write(tmp_path, tensors, nodes, ["y", "y2", "y3"])
    model = onnx.load(path, load_external_data=False)
    model.graph.input.append(helper.make_tensor_value_info("j", TensorProto.INT64, [1, 3]))
    onnx.save(model, path)
    feeds = {"i": np.array([2, -1], np.int64), "j": np.array([[1, -2, 0]], np.int64)}
    want = _reference(path, feeds)
    assert not isinstance(want, Exception), want
    sess = dmlshim.InferenceSession(path, engine=engine)
    for _ in range(5):
        for g, w in zip(sess.run(None, feeds), want, strict=True):
            np.testing.assert_array_equal(g, w)
