"""A value computed on first use, and the ``min_feature_level`` field that holds one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dml.enums import FeatureLevel

__all__ = ["Deferred", "LevelField"]


class Deferred:
    """The value of ``compute(*args)``, computed on first use, then kept; every copy of its holder
    shares it. Pickling and deep copies compute it and carry the plain value.
    """

    __slots__ = ("_args", "_compute", "_value")

    _PENDING: Any = object()

    def __init__(self, compute: Callable[..., Any], *args: Any) -> None:
        self._compute: Callable[..., Any] | None = compute
        self._args = args
        self._value: Any = Deferred._PENDING

    def get(self) -> Any:
        value = self._value
        if value is Deferred._PENDING:
            compute = self._compute
            if compute is None:  # another thread has just stored the value
                return self._value
            value = self._value = compute(*self._args)
            self._compute = None
            self._args = ()
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        return (_resolved, (self.get(),))


def _resolved(value: Any) -> Any:
    return value


class LevelField:
    """The ``min_feature_level`` field: a FeatureLevel, None, or a :class:`Deferred` computing one.

    Finding the lowest level means lowering the node again at lower levels, which nothing on the
    execution path reads; the translator defers it to the first read (reports, JSON, comparisons).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    def __get__(self, obj: object, objtype: type | None = None) -> FeatureLevel | None:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__[self._slot]
        return value.get() if type(value) is Deferred else value

    def __set__(self, obj: object, value: FeatureLevel | Deferred | None) -> None:
        obj.__dict__[self._slot] = value
