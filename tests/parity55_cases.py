"""What the parity55 tests share: the engines, two small gather models and the comparison of an outcome
with onnxruntime's (its class, its words first)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.oracle import IR_VERSION

CPU = "CPUExecutionProvider"
ENGINES: dict[str, dict[str, Any]] = {
    "partitioned": {},
    "cpu": {"engine": "cpu"},
    "customop": {"engine": "customop"},
}


def engine_kwargs(name: str) -> dict[str, Any]:
    """The keyword arguments that pick engine ``name`` (the custom-op engine needs onnxruntime-extensions)."""
    if name == "customop":
        pytest.importorskip("onnxruntime_extensions")
    return ENGINES[name]


def gather_model() -> onnx.ModelProto:
    """``y = Relu(Gather(w, i))`` over a 3x2 float initializer."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], (np.arange(6, dtype=np.float32) - 2).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["g"], name="g"), helper.make_node("Relu", ["g"], ["y"])],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


FEEDS = {"i": np.array([2, -1], dtype=np.int64)}


def outcome(build: Any) -> tuple[str, Any]:
    """("ok", value) or ("error", the exception) of ``build()``; both libraries' provider warnings are
    kept out of the test log."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", build()
    except Exception as exc:  # whichever class: compared with onnxruntime's below
        return "error", exc


def same_error(theirs: BaseException, ours: BaseException) -> None:
    """dmlshim's error is an instance of onnxruntime's class, and its text begins with onnxruntime's."""
    assert isinstance(ours, type(theirs)), (type(theirs), type(ours).__mro__)
    assert str(ours).startswith(str(theirs).strip().rstrip(".")), (str(theirs), str(ours))


def two_input_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], name="g")],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def as_ortvalue(array: np.ndarray) -> Any:
    return ort.OrtValue.ortvalue_from_numpy(array)


DATA = np.arange(6, dtype=np.float32).reshape(3, 2)
IDX = np.array([2, -1], dtype=np.int64)
