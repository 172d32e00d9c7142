"""Running a model built in a test on real DirectML (``dmlshim directml sweep`` of one saved model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx


def sweep_built(model: onnx.ModelProto, feeds: dict[str, np.ndarray], folder: Path, name: str) -> Any:
    """``model`` saved as ``folder/name.onnx`` with its feeds beside it, run on real DirectML: the
    sweep's result (outcome, message, predicted refusals)."""
    from dmlshim.directml.sweep import sweep_one

    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))
    np.savez(folder / f"{name}.npz", **feeds)
    return sweep_one(path)
