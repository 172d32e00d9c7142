"""The small records of one lowering attempt: the View (un-padded DirectML shapes), the data plan and the
result. Built on every attempt and never leaving the translator, so named tuples (half the cost of a frozen
dataclass to build)."""

from __future__ import annotations

from typing import NamedTuple

from ...dml.enums import DataType
from ...dml.operators import OperatorDesc
from ..plan import (
    InputBinding,
    Layout,
    OutputBinding,
    Reason,
    Reinterpret,
)


class View(NamedTuple):
    """The un-padded shapes of the DirectML tensors and the operator fields in view coordinates.

    ``fields`` holds the UINT fields (Axis counted in the view's InputTensor dimensions, before the shift
    for padding). ``input_strides`` is set for a strided window of the data.
    """

    input: tuple[int, ...]
    indices: tuple[int, ...]
    output: tuple[int, ...]
    updates: tuple[int, ...] | None = None
    input_strides: tuple[int, ...] | None = None
    axis: int | None = None
    fields: tuple[tuple[str, int], ...] = ()

    @property
    def ranks(self) -> tuple[int, ...]:
        shapes = [self.input, self.indices, self.output]
        if self.updates is not None:
            shapes.append(self.updates)
        return tuple(len(s) for s in shapes)


class DataPlan(NamedTuple):
    """How data (and updates, output) bytes are bound."""

    onnx_type: int
    dml_type: DataType
    reinterpret: Reinterpret

    @property
    def pairs(self) -> bool:
        return self.reinterpret is Reinterpret.UINT32_PAIRS


class Lowering(NamedTuple):
    """A converter's result: the descriptor and the plan."""

    operator: OperatorDesc
    layout: Layout
    inputs: tuple[InputBinding, ...]
    output: OutputBinding
    notes: tuple[Reason, ...] = ()
    attributes: tuple[tuple[str, object], ...] = ()
