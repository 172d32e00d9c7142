"""Two processes naming one ``optimized_model_filepath`` at once (issue 35's leftovers).

onnxruntime lets both write (each build writes the file; the last stays). dmlshim's careful writer
refused one of them (6 of 60 builds in two processes of 30) as if the other process's optimized model
were a file the user wrote meanwhile. A file that appeared meanwhile holding exactly the bytes the
session would write is now kept as it is (nothing is lost, and onnxruntime writes the same bytes for the
same model and options in every process); any other newcomer is still never replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import BadInputError
from dmlshim.fileio import files

PROVIDER = str(Path(__file__).resolve().parents[1] / "provider")


def _model(path: Path, start: int = 0) -> Path:
    table = numpy_helper.from_array(np.arange(start, start + 4000, dtype=np.float32).reshape(1000, 4), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="g"),
            helper.make_node("Relu", ["y"], ["z"], name="r"),
        ],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        [table],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import onnxruntime as ort
    import dmlshim
    from dmlshim.ort import session_options

    role, model, target, folder = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    real = session_options.OrtInferenceSession

    def held(*args, **kwargs):
        # the first process stages its optimized model, then waits while the second writes its own
        made = real(*args, **kwargs)
        (folder / "staged").touch()
        while not (folder / "written").exists():
            time.sleep(0.01)
        return made

    if role == "first":
        session_options.OrtInferenceSession = held
    else:
        while not (folder / "staged").exists():
            time.sleep(0.01)
    so = ort.SessionOptions()
    so.optimized_model_filepath = target
    try:
        dmlshim.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        print("ok")
    except dmlshim.BadInputError as exc:
        print("refused:", exc)
    finally:
        if role == "second":
            (folder / "written").touch()
    """
)


def _race(tmp_path: Path, first_model: Path, second_model: Path, target: Path) -> tuple[str, str]:
    """Process one checks the path and stages its file, process two builds and writes the same path,
    then process one places its file."""
    env = {**os.environ, "PYTHONPATH": PROVIDER}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, role, str(model), str(target), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for role, model in (("first", first_model), ("second", second_model))
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    return outs[0], outs[1]


def _ort_optimized(model: Path, target: Path) -> onnx.GraphProto:
    """onnxruntime's optimized graph (its opset list depends on what this process registered before)."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(target)
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return onnx.load(str(target)).graph


def test_two_processes_writing_one_optimized_model_both_build(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    expected = _ort_optimized(model, tmp_path / "ort.onnx")
    target = tmp_path / "o.onnx"
    assert _race(tmp_path, model, model, target) == ("ok", "ok")
    assert onnx.load(str(target)).graph == expected  # onnxruntime's optimized model, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "ort.onnx", "staged", "written"]


def test_another_models_file_written_meanwhile_is_kept(tmp_path: Path) -> None:
    """A different file (another model's optimized graph, as a user's file) appearing meanwhile is not
    replaced: the first process refuses, naming the path."""
    first, second = _model(tmp_path / "a.onnx"), _model(tmp_path / "b.onnx", start=7)
    expected = _ort_optimized(second, tmp_path / "ort.onnx")
    target = tmp_path / "o.onnx"
    one, two = _race(tmp_path, first, second, target)
    assert two == "ok"
    assert one.startswith("refused:") and "appeared while dmlshim was running" in one
    assert onnx.load(str(target)).graph == expected


@pytest.mark.parametrize("meanwhile", [b"same", b"other"])
def test_the_writer_keeps_a_twin_and_refuses_anything_else(tmp_path: Path, meanwhile: bytes) -> None:
    target = tmp_path / "o.onnx"
    files.check_output_file(target, overwrite=True)
    target.write_bytes(meanwhile)  # as another process would, after the check
    if meanwhile == b"same":
        files.write_bytes(target, b"same", overwrite=True, what="optimized model")
    else:
        with pytest.raises(BadInputError, match="appeared"):
            files.write_bytes(target, b"same", overwrite=True, what="optimized model")
    assert target.read_bytes() == meanwhile
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]


def test_a_link_to_the_same_bytes_is_no_twin(tmp_path: Path) -> None:
    target = tmp_path / "o.onnx"
    files.check_output_file(target, overwrite=True)
    (tmp_path / "real").write_bytes(b"same")
    target.symlink_to(tmp_path / "real")
    with pytest.raises(BadInputError, match="appeared"):
        files.write_bytes(target, b"same", overwrite=True, what="optimized model")
    assert target.is_symlink()


_LOOP = textwrap.dedent(
    """
    import sys
    import onnxruntime as ort
    module = ort if sys.argv[1] == "onnxruntime" else __import__("dmlshim")
    outcomes = []
    for _ in range(int(sys.argv[4])):
        so = ort.SessionOptions()
        so.optimized_model_filepath = sys.argv[3]
        try:
            module.InferenceSession(sys.argv[2], so, providers=["CPUExecutionProvider"])
            outcomes.append("ok")
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    print(" ".join(outcomes))
    """
)


@pytest.mark.parametrize("module", ["onnxruntime", "dmlshim"])
def test_two_processes_building_in_a_loop_all_build_as_in_onnxruntime(tmp_path: Path, module: str) -> None:
    """onnxruntime's own behaviour: every build of both processes succeeds, the file stays whole."""
    model = _model(tmp_path / "m.onnx")
    target = tmp_path / "o.onnx"
    env = {**os.environ, "PYTHONPATH": PROVIDER}
    args = [sys.executable, "-c", _LOOP, module, str(model), str(target), "15"]
    procs = [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert outs == [["ok"] * 15] * 2
    assert onnx.load(str(target)).graph == _ort_optimized(model, tmp_path / "ort.onnx")
