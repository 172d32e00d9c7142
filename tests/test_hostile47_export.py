"""hostile47: ``export --overwrite`` removes the node folders the previous ``index.json`` listed; a file the
export reads that lies inside one (the model saved into its own node folder, reached directly or through a
link, its external data, the ``--inputs`` file) was removed with it while it was exported. It is now
refused, naming the input, and nothing is removed; the model itself stays as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.dxdispatch.export import export_model
from dmlshim.errors import BadInputError
from tests.oracle import IR_VERSION
from tests.safety_helpers import run_child


def _model(path: Path, external: bool = False) -> None:
    weights = numpy_helper.from_array(np.arange(4000, dtype=np.float32).reshape(1000, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="gather")],
        "h47",
        [helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    if external:
        onnx.save(model, path, save_as_external_data=True, location=path.stem + ".bin", size_threshold=0)
    else:
        onnx.save(model, path)


def _previous_export(tmp_path: Path) -> tuple[Path, Path]:
    """An export folder and its one node folder."""
    _model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert run_child(["export", str(tmp_path / "m.onnx"), "-o", str(out)]).returncode == 0
    (node,) = [p for p in out.iterdir() if p.is_dir()]
    return out, node


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", ["model", "link_to_model", "external_data", "inputs_file"])
def test_overwrite_never_removes_an_input_inside_a_listed_node_folder(tmp_path: Path, case: str) -> None:
    out, node = _previous_export(tmp_path)
    model = node / "mine.onnx"
    _model(model, external=case == "external_data")
    args = ["export", str(model), "-o", str(out), "--overwrite"]
    if case == "link_to_model":
        link = tmp_path / "link.onnx"
        link.symlink_to(model)
        args[1] = str(link)
    if case == "inputs_file":
        shutil.move(model, tmp_path / "mine.onnx")
        np.savez(node / "in.npz", i=np.array([1, 2]))
        args[1] = str(tmp_path / "mine.onnx")
        args += ["--inputs", str(node / "in.npz")]
    before = _snapshot(out)
    result = run_child(args)
    assert result.returncode == 2, result.stderr
    assert "refusing to remove an input" in result.stderr and "Traceback" not in result.stderr
    assert _snapshot(out) == before  # the model, its weights, the inputs and the previous export


def test_the_library_call_refuses_it_too(tmp_path: Path) -> None:
    out, node = _previous_export(tmp_path)
    model = node / "mine.onnx"
    _model(model)
    before = _snapshot(out)
    with pytest.raises(BadInputError, match="refusing to remove an input"):
        export_model(str(model), out, overwrite=True)
    assert _snapshot(out) == before


def test_an_input_beside_the_node_folders_is_kept_and_the_export_replaced(tmp_path: Path) -> None:
    out, node = _previous_export(tmp_path)
    _model(out / "mine.onnx")
    (node / "notes.txt").write_text("old", encoding="utf-8")
    result = run_child(["export", str(out / "mine.onnx"), "-o", str(out), "--overwrite"])
    assert result.returncode == 0, result.stderr
    assert (out / "mine.onnx").is_file() and (out / "index.json").is_file()
    assert not (node / "notes.txt").exists()  # the listed node folder was replaced whole, as documented
