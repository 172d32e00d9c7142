"""Counting onnx's shape-inference passes in dmlshim's data propagation (tests only)."""

from __future__ import annotations

from typing import Any

import pytest

from dmlshim.model import data_prop


def count_inference_passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per onnx inference pass dmlshim makes from now on, whether it propagated data."""
    calls: list[bool] = []
    infer = data_prop._infer

    def counted(m: Any, check_type: Any, strict_mode: Any, data_prop_on: bool, *serialized: Any) -> Any:
        calls.append(data_prop_on)
        return infer(m, check_type, strict_mode, data_prop_on, *serialized)

    monkeypatch.setattr(data_prop, "_infer", counted)
    return calls
