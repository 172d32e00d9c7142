"""Hostile round 12: the piece-by-piece ONNX writer (fileio/onnx_pieces.py) and what export writes.

The pieces must parse to the very model ``SerializeToString`` gives (every field: typed and raw data,
strings, sparse initializers, a large attribute tensor, functions, training info, annotations) and
onnxruntime must run the file as it runs the model; the careful writer's rules hold while the pieces are
written (a directory or a link appearing at the target meanwhile is never replaced or followed).
Expected values: onnxruntime's CPU session of the model.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.errors import BadInputError
from dmlshim.fileio import files, onnx_pieces
from tests.oracle import IR_VERSION, ort_session


def _everything() -> onnx.ModelProto:
    weights = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
    inits = [
        weights,
        helper.make_tensor("typed", T.FLOAT, [2], [1.5, -0.0]),
        helper.make_tensor("strs", T.STRING, [2], [b"a", b"\xc3\xa9b"]),
        helper.make_tensor("i64", T.INT64, [2], [2**62, -1]),
    ]
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp", T.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("spi", T.INT64, [2], [0, 3]),
        [4],
    )
    twice = helper.make_function(
        "local",
        "Twice",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["c"], value=numpy_helper.from_array(np.ones((256, 256), np.float32))
        ),
        helper.make_node("Twice", ["W"], ["w2"], domain="local"),
        helper.make_node("Gather", ["w2", "idx"], ["y"], axis=0),
        helper.make_node("Gather", ["strs", "idx1"], ["s"], axis=0),
        helper.make_node("Gather", ["sp", "idx1"], ["spg"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "everything",
        [
            helper.make_tensor_value_info("idx", T.INT64, [2]),
            helper.make_tensor_value_info("idx1", T.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("y", T.FLOAT, None),
            helper.make_tensor_value_info("c", T.FLOAT, None),
            helper.make_tensor_value_info("s", T.STRING, None),
            helper.make_tensor_value_info("spg", T.FLOAT, None),
        ],
        inits,
        doc_string="graph doc",
        sparse_initializer=[sparse],
        value_info=[helper.make_tensor_value_info("w2", T.FLOAT, [3, 4])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[twice],
        producer_name="hostile12",
        doc_string="model doc",
        ir_version=IR_VERSION,
    )
    helper.set_model_props(model, {"k": "v"})
    model.graph.quantization_annotation.add().tensor_name = "W"
    return model


def test_the_pieces_parse_to_the_model_and_run_as_it_runs() -> None:
    model = _everything()
    buffer = io.BytesIO()
    onnx_pieces.piece_writer(model, "target.onnx")(buffer)
    data = buffer.getvalue()
    assert len(data) == model.ByteSize()
    assert onnx.load_from_string(data) == model
    feeds = {"idx": np.array([2, 0], np.int64), "idx1": np.array([1], np.int64)}
    ours = ort_session(data, quiet=True).run(None, feeds)
    expected = ort_session(model, quiet=True).run(None, feeds)
    for a, b in zip(ours, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert list(a.ravel()) == list(b.ravel()) if a.dtype == object else a.tobytes() == b.tobytes()


@pytest.mark.parametrize("appears", ["directory", "link"])
def test_what_appears_at_the_target_while_the_pieces_are_written_is_left_alone(
    appears: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_pieces, "STREAM_MIN_BYTES", 0)
    target, victim = tmp_path / "model.onnx", tmp_path / "victim.txt"
    victim.write_text("keep", encoding="utf-8")
    real = onnx_pieces.piece_writer

    def meanwhile(model: onnx.ModelProto, path: str) -> object:
        write = real(model, path)

        def writer(handle: io.BufferedWriter) -> None:
            write(handle)
            if appears == "directory":
                target.mkdir()
            else:
                os.symlink(victim, target)

        return writer

    monkeypatch.setattr(onnx_pieces, "piece_writer", meanwhile)
    with pytest.raises(BadInputError):
        files.write_onnx(target, _everything(), overwrite=True)
    assert victim.read_text(encoding="utf-8") == "keep"
    assert target.is_dir() if appears == "directory" else target.is_symlink()


def test_export_of_gathers_reading_a_sparse_initializer_through_a_function(tmp_path: Path) -> None:
    model = _everything()
    onnx.save(model, tmp_path / "m.onnx")
    feeds = {"idx": np.array([2, 0], np.int64), "idx1": np.array([1], np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "export", "m.onnx", "-o", "out", "--inputs", "in.npz", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    expected = dict(zip(["y", "c", "s", "spg"], ort_session(model, quiet=True).run(None, feeds), strict=True))
    folders = {p.name.split("_", 1)[1]: p for p in (tmp_path / "out").iterdir() if p.is_dir()}
    gathered = np.load(folders["Gather_1"] / "expected_output.npy", allow_pickle=False)
    assert gathered.tobytes() == expected["y"].tobytes()
    sparse = np.load(folders["Gather_3"] / "expected_output.npy", allow_pickle=False)
    assert sparse.tobytes() == expected["spg"].tobytes()
