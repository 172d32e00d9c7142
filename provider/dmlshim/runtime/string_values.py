"""String tensors as onnxruntime ``OrtValue`` objects (onnxruntime's own factories refuse strings)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .real import OrtInferenceSession

__all__ = ["string_ortvalue"]


def string_ortvalue(value: np.ndarray) -> Any:
    """A string tensor as an ``onnxruntime.OrtValue``, which only an onnxruntime session can make (its
    ``OrtValue`` factories refuse strings): a model holding the strings as a constant, run once."""
    as_text = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v), otypes=[object])
    strings = as_text(value) if value.size else np.asarray(value, dtype=object)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["strings"], ["out"])],
        "dmlshim_string_ortvalue",
        [],
        [helper.make_tensor_value_info("out", TensorProto.STRING, list(value.shape))],
        [numpy_helper.from_array(np.asarray(strings, dtype=object), "strings")],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])
    session = OrtInferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run_with_ort_values(None, {})[0]
