"""A model file whose initializers are in external data, with or without the
``session.model_external_initializers_file_folder_path`` entry naming a folder that lacks them: dmlshim's
drop-in session refuses it (with onnxruntime's class) or reads the data where the installed onnxruntime does
(1.32 refuses; 1.24.4 reads the model's own folder)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as real_ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.external_folder import outcome

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL")


def _model(folder: Path, value: float, size: int) -> Path:
    """A model y = x + w whose w (``size`` floats equal to ``value``) is in ``folder``/w.bin."""
    folder.mkdir()
    w = numpy_helper.from_array(np.full((size,), value, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


@pytest.fixture(params=[4, 1 << 18], ids=["small", "large"])
def models(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path, int]]:
    """The model with w = 1 in ``a`` and with w = 2 in ``b``; the working directory is ``tmp_path``."""
    size = int(request.param)
    a, b = _model(tmp_path / "a", 1.0, size), _model(tmp_path / "b", 2.0, size)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield a, b, size
    finally:
        os.chdir(here)


def _compare(source: Callable[[], Any], size: int, folder: str | None) -> None:
    for level in LEVELS:
        want = outcome(real_ort, source(), size, folder, level)
        got = outcome(dmlshim, source(), size, folder, level)
        assert got == want, (level, folder, got, want)


@pytest.mark.parametrize("folder", [None, "", "b", "missing", "ABS_B", "ABS_MISSING"])
def test_path_with_external_data_folder_as_onnxruntime(
    models: tuple[Path, Path, int], folder: str | None
) -> None:
    a, b, size = models
    named = {"ABS_B": str(b.parent), "ABS_MISSING": str(a.parent.parent / "nowhere")}.get(
        folder or "", folder
    )
    _compare(lambda: str(a), size, named)
