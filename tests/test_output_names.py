"""What a file name means to the commands that write arrays: ``run -o out.json`` writes polygraphy's
RunResults JSON (as ``validate --save-outputs out.json`` does; it wrote .npz bytes under the .json name),
and names that differ only in case are one file where the file system folds case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim import portable
from dmlshim.cli.main import main
from dmlshim.cli.validate_files import _one_file_each
from dmlshim.errors import BadInputError
from dmlshim.fileio.array_files import read_arrays
from tests.oracle import IR_VERSION


def _model(folder: Path) -> tuple[Path, dict[str, np.ndarray], list[np.ndarray]]:
    weights = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["g"], axis=0), helper.make_node("Relu", ["g"], ["y"])],
        "names",
        [helper.make_tensor_value_info("idx", T.INT64, [3])],
        [
            helper.make_tensor_value_info("y", T.FLOAT, [3, 4]),
            helper.make_tensor_value_info("g", T.FLOAT, [3, 4]),
        ],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    feeds = {"idx": np.array([7, 0, 3], dtype=np.int64)}
    np.savez(folder / "in.npz", **feeds)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    expected = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    return path, feeds, expected


@pytest.mark.parametrize("name", ["out.json", "OUT.JSON", "out.npz", "out"])
def test_run_output_format_follows_the_name(name: str, tmp_path: Path) -> None:
    path, _, expected = _model(tmp_path)
    target = tmp_path / name
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(target)]) == 0
    head = target.read_bytes()[:2]
    assert (head == b"{\n") == name.lower().endswith(".json"), head
    got = read_arrays(target)
    assert sorted(got) == ["g", "y"]
    np.testing.assert_array_equal(got["y"], expected[0])
    np.testing.assert_array_equal(got["g"], expected[1])


def test_validate_reads_back_what_run_wrote_as_reference(tmp_path: Path) -> None:
    """The JSON written by ``run -o`` is a polygraphy RunResults file: validate takes it as reference."""
    path, _, _ = _model(tmp_path)
    out = tmp_path / "ref.json"
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]) == 0
    code = main(
        ["validate", str(path), "--inputs", str(tmp_path / "in.npz"), "--reference-outputs", str(out), "-q"]
    )
    assert code == 0


def test_names_differing_in_case_are_one_file_where_names_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = str(tmp_path / "Out.npz"), str(tmp_path / "out.NPZ")
    _one_file_each({"--save-inputs": a, "--save-outputs": b})  # Linux: two files
    monkeypatch.setattr(portable, "is_windows", lambda: True)
    with pytest.raises(BadInputError, match="same file"):
        _one_file_each({"--save-inputs": a, "--save-outputs": b})


def test_an_output_differing_from_an_input_in_case_is_the_input_where_names_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _, _ = _model(tmp_path)
    monkeypatch.setattr(portable, "is_windows", lambda: True)
    code = main(["run", str(path), "-o", str(tmp_path / "IN.NPZ"), "--inputs", str(tmp_path / "in.npz")])
    assert code == 2
    assert (tmp_path / "in.npz").read_bytes()[:2] == b"PK"
