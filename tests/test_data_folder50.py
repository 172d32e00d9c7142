"""A model given as bytes whose initializers are in external data, found from the working directory or from
the folder ``session.model_external_initializers_file_folder_path`` names (present, missing, holding other
data), at each optimization level: dmlshim's drop-in session gives what the installed onnxruntime gives
(the value, or onnxruntime's exception class), whichever version it is (1.32 and 1.24.4 differ in their
classes; see dmlshim.execute.weights.data_folder)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as real_ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.external_folder import model_with_data_in, outcome

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL")


@pytest.fixture(
    params=[(4, False), (1 << 18, False), (1 << 18, True)], ids=["small", "large", "large-folded"]
)
def models(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path, int]]:
    """The model with w = 1 in ``a`` and with w = 2 in ``b``; the working directory is ``tmp_path``."""
    size, folded = request.param
    a, b = (
        model_with_data_in(tmp_path / "a", 1.0, size, folded),
        model_with_data_in(tmp_path / "b", 2.0, size, folded),
    )
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield a, b, size
    finally:
        os.chdir(here)


@pytest.mark.parametrize("cwd", ["base", "a"])
@pytest.mark.parametrize("folder", [None, "", "a", "b", "missing", ".", "ABS_B", "ABS_MISSING"])
def test_bytes_external_data_as_onnxruntime(
    models: tuple[Path, Path, int], cwd: str, folder: str | None
) -> None:
    a, b, size = models
    data = a.read_bytes()
    if cwd == "a":
        os.chdir(a.parent)
    named = {"ABS_B": str(b.parent), "ABS_MISSING": str(a.parent.parent / "nowhere")}.get(
        folder or "", folder
    )
    if named in ("a", "b", "missing") and cwd == "a":
        named = os.path.join("..", named)
    for level in LEVELS:
        want = outcome(real_ort, data, size, named, level)
        got = outcome(dmlshim, data, size, named, level)
        assert got == want, (real_ort.__version__, level, cwd, folder, got, want)


def test_bytes_small_weight_in_working_directory_is_refused_when_optimized(
    models: tuple[Path, Path, int],
) -> None:
    """The case dmlshim asks onnxruntime about: onnxruntime's constant sharing reads a weight of at most 8
    elements with optimizations on and cannot find it without the model's path; it runs at
    ORT_DISABLE_ALL."""
    a, _, size = models
    os.chdir(a.parent)
    data = a.read_bytes()
    for level in LEVELS:
        want = outcome(real_ort, data, size, None, level)
        assert outcome(dmlshim, data, size, None, level) == want
        if size <= 8:
            assert want == (1.0 if level == "ORT_DISABLE_ALL" else "Fail"), (real_ort.__version__, level)


@pytest.mark.parametrize(("cwd", "folder"), [("a", None), ("a", "."), (".", "a"), ("a", "ABS_A")])
def test_bytes_data_leaving_the_folder_as_onnxruntime(tmp_path: Path, cwd: str, folder: str | None) -> None:
    """A location leading out of the folder the data is looked for in (``../d/w.bin``), the file there:
    refused by both onnxruntime versions, with their class, whichever folder is named."""
    size = 1 << 14
    (tmp_path / "a").mkdir()
    (tmp_path / "d").mkdir()
    np.full((size,), 3.0, np.float32).tofile(tmp_path / "d" / "w.bin")
    w = onnx.TensorProto()
    w.name, w.data_type, w.data_location = "w", TensorProto.FLOAT, TensorProto.EXTERNAL
    w.dims.append(size)
    for key, value in (("location", "../d/w.bin"), ("offset", "0"), ("length", str(size * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
        [w],
    )
    data = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()
    here = os.getcwd()
    os.chdir(tmp_path / cwd)
    try:
        named = str(tmp_path / "a") if folder == "ABS_A" else folder
        for level in LEVELS:
            want = outcome(real_ort, data, size, named, level)
            assert outcome(dmlshim, data, size, named, level) == want, (real_ort.__version__, level)
    finally:
        os.chdir(here)
