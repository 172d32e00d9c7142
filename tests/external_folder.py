"""What a session of a model with external data gives, in onnxruntime or dmlshim: shared by the tests of
``session.model_external_initializers_file_folder_path``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def outcome(module: Any, source: Any, size: int, folder: str | None, level: str) -> Any:
    """The first output value of ``y = x + w`` at ``x = 0``, or the onnxruntime exception class the
    session's build raised (``module`` is onnxruntime or dmlshim)."""
    so = module.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = getattr(module.GraphOptimizationLevel, level)
    if folder is not None:
        so.add_session_config_entry(FOLDER_KEY, folder)
    try:
        session = module.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        classes = [c for c in type(exc).__mro__ if c.__module__.startswith("onnxruntime")]
        assert classes, f"{type(exc).__name__} is no onnxruntime class: {exc}"
        return classes[0].__name__
    return float(session.run(None, {"x": np.zeros(size, np.float32)})[0][0])


def model_with_data_in(folder: Path, value: float, size: int, folded: bool = False) -> Path:
    """``folder``/m.onnx: y = x + w (or x + Relu(w), which constant folding reads) whose w (``size`` floats
    equal to ``value``) is in ``folder``/w.bin."""
    folder.mkdir()
    w = numpy_helper.from_array(np.full((size,), value, np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    if folded:
        nodes = [helper.make_node("Relu", ["w"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "m.onnx"
    here = os.getcwd()
    os.chdir(folder)  # onnx looks for an existing data file from the working directory
    try:
        onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    finally:
        os.chdir(here)
    return path
