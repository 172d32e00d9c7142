"""Sessions of one program naming the same ``optimized_model_filepath`` on several threads at once.

onnxruntime builds every one (each writes the file, the last one stays). dmlshim refused some of them
(4-5 of 40) as if another session's optimized model were a file the user wrote meanwhile: its careful
writer now knows the files this process placed itself, and looks and moves as one step.
"""

from __future__ import annotations

from multiprocessing.pool import ThreadPool
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError


def _model(folder: Path) -> Path:
    table = numpy_helper.from_array(np.arange(4000, dtype=np.float32).reshape(1000, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [table],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _build_all(module: object, model: Path, target: Path) -> list[str]:
    def build(_: int) -> str:
        so = module.SessionOptions()  # type: ignore[attr-defined]
        so.optimized_model_filepath = str(target)
        try:
            session = module.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
            got = session.run(None, {"i": np.array([3, 999], np.int64)})[0]
        except Exception as exc:  # the outcome is compared, whatever it is
            return f"{type(exc).__name__}: {exc}"
        return (
            "ok"
            if got.tobytes() == np.arange(4000, dtype=np.float32).reshape(1000, 4)[[3, 999]].tobytes()
            else "wrong"
        )

    with ThreadPool(4) as pool:
        return pool.map(build, range(40), chunksize=1)


@pytest.mark.parametrize("module", [ort, dmlshim], ids=["onnxruntime", "dmlshim"])
def test_every_session_naming_one_optimized_model_is_built(tmp_path: Path, module: object) -> None:
    model = _model(tmp_path)
    target = tmp_path / "o.onnx"
    outcomes = _build_all(module, model, target)
    assert outcomes == ["ok"] * len(outcomes)
    written = onnx.load(str(target))
    assert [n.op_type for n in written.graph.node] == ["Gather"]


def test_a_file_the_user_puts_there_meanwhile_is_still_kept(tmp_path: Path) -> None:
    from dmlshim.fileio import files

    target = tmp_path / "o.onnx"
    files.write_bytes(target, b"first", overwrite=True, what="optimized model")
    files.remember_output(target)
    target.unlink()
    target.write_bytes(b"the user's")
    with pytest.raises(BadInputError, match=r"appeared|changed"):
        files.write_bytes(target, b"second", overwrite=True, what="optimized model")
    assert target.read_bytes() == b"the user's"
