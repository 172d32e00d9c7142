"""One converter class per ONNX op, registered explicitly (no discovery by name)."""

from __future__ import annotations

from collections.abc import Mapping

from .base import ConvertContext, Converter, Lowering, NodeFailure
from .gather import GatherConverter
from .gather_elements import GatherElementsConverter
from .gather_nd import GatherNDConverter
from .scatter_elements import ScatterConverter, ScatterElementsConverter
from .scatter_nd import ScatterNDConverter

__all__ = ["CONVERTERS", "ConvertContext", "Converter", "Lowering", "NodeFailure", "get_converter"]

CONVERTERS: Mapping[tuple[str, str], Converter] = {
    ("", "Gather"): GatherConverter(),
    ("", "GatherElements"): GatherElementsConverter(),
    ("", "GatherND"): GatherNDConverter(),
    ("", "Scatter"): ScatterConverter(),
    ("", "ScatterElements"): ScatterElementsConverter(),
    ("", "ScatterND"): ScatterNDConverter(),
}
"""(domain, op_type) -> converter; the ONNX default domain is "" (also spelled "ai.onnx")."""


def get_converter(domain: str, op_type: str) -> Converter | None:
    """The converter of an op, or None if dmlshim does not translate it."""
    return CONVERTERS.get(("" if domain == "ai.onnx" else domain, op_type))
