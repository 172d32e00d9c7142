"""What a session of a model with external data gives, in onnxruntime or dmlshim: shared by the tests of
``session.model_external_initializers_file_folder_path``."""

from __future__ import annotations

from typing import Any

import numpy as np

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
