"""What every rule check reads: the descriptor, its operator, the feature level and its tensors, and how
sizes are shown in messages (symbolic sizes by their dimension's name)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .enums import FeatureLevel, OperatorType
from .operators import OperatorDesc
from .rules import Violation
from .tensor import BufferTensorDesc


@dataclass(frozen=True)
class RuleContext:
    desc: OperatorDesc
    op: OperatorType
    fl: FeatureLevel
    tensors: dict[str, BufferTensorDesc]
    dimension_count: int  # InputTensor.DimensionCount: the reference for every other count

    @property
    def where(self) -> str:
        return f"{self.op.dml_name} at {self.fl.dml_name}"

    @property
    def same_dimension_count(self) -> bool:
        return all(t.dimension_count == self.dimension_count for t in self.tensors.values())

    def violation(self, rule: str, field: str, value: object, text: str) -> Violation:
        return Violation(rule=rule, field=field, message=f"{self.where}: {text}.", value=shown_value(value))


Check = Callable[[RuleContext], Iterator[Violation]]


def sizes_of(sizes: Sequence[int]) -> list[int]:
    return [int(s) for s in sizes]


def shown(sizes: Sequence[int]) -> list[int | str]:
    from .symbolic import describe  # symbolic descriptors: sizes by their dimension's name

    return [describe(int(s)) for s in sizes]


def shown_value(value: object) -> object:
    from . import symbolic

    return symbolic.shown_value(value)


def known_different(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two size lists are known to differ: two differently named symbols (inspect's placeholders)
    may be equal at run time, so only sizes known to differ count (the run checks the real ones)."""
    from .symbolic import any_differ

    return any_differ(sizes_of(a), sizes_of(b))
