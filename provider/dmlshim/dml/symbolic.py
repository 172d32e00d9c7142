"""Translating nodes whose ranks and types are known but whose sizes are symbolic (``batch``, ``seq``).

The operator, the DimensionCount, Axis and the other counts, the data types, the status and the lowest
feature level depend only on ranks, types and attributes. So the translator lowers such a node with each
symbolic dimension stood in for by a *placeholder*: an int (:class:`SymDim`) carrying the dimension's name,
whose value is a large prime chosen per name. Converters then run unchanged; products of dimensions
(merged layouts, strides) stay products of those primes, so every value of the descriptor factors back
into a readable expression (``seq*768``) when it is shown.

What depends on the actual sizes (an empty tensor, the 2^32-1 element limit, UINT32 Sizes and
TotalTensorSizeInBytes, whether indices are smaller than data) is not decided here: the node carries a
``SIZES_SYMBOLIC`` note saying those rules are checked when it runs with real shapes.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "SIZE_DEPENDENT_RULES",
    "SymDim",
    "any_differ",
    "describe",
    "differ",
    "is_symbolic",
    "placeholder_shape",
    "render_json",
    "shown_value",
]

UNNAMED = "?"
"""How a dimension without a name (neither dim_value nor dim_param) is shown."""

SIZE_DEPENDENT_RULES = frozenset(
    {"SIZE_ZERO", "UINT_OUT_OF_RANGE", "ELEMENT_COUNT_EXCEEDS_MAX", "TOTAL_TENSOR_SIZE_TOO_SMALL"}
)
"""DirectML rules (``dml.rules``) that only real sizes decide: not applied to placeholder sizes."""

_INVENTED = re.compile(r"unk__\d+")

_FIRST_PLACEHOLDER = 1_000_000_007
"""Placeholders are primes from here on: far above any real dimension, so no value is mistaken."""


_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
"""Miller-Rabin bases that decide primality exactly for every n below :data:`_WITNESSES_BOUND`."""
_WITNESSES_BOUND = 3_317_044_064_679_887_385_961_981


def _is_prime(n: int) -> bool:
    """Whether ``n`` is prime: deterministic Miller-Rabin (trial division near 10^9 cost ~15K divisions
    per prime, 0.7 s for the 49 placeholders of a 6-layer static-cache export)."""
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    if n >= _WITNESSES_BOUND:
        return all(n % d for d in range(41, int(n**0.5) + 1, 2))
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _primes() -> Iterator[int]:
    for n in itertools.count(_FIRST_PLACEHOLDER):
        if _is_prime(n):
            yield n


_PRIMES = _primes()
_LOCK = threading.Lock()
_VALUES: dict[str, int] = {}
_NAMES: dict[int, str] = {}


class SymDim(int):
    """A symbolic dimension: an int placeholder (a large prime) that remembers the dimension's name."""

    name: str

    def __new__(cls, value: int, name: str) -> SymDim:
        out = super().__new__(cls, value)
        out.name = name
        return out

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        return (SymDim, (int(self), self.name))


def _placeholder(key: str, shown: str) -> SymDim:
    value = _VALUES.get(key)
    if value is None:
        with _LOCK:
            value = _VALUES.get(key)
            if value is None:
                value = next(_PRIMES)
                _NAMES[value] = shown
                _VALUES[key] = value
    return SymDim(value, shown)


@functools.lru_cache(maxsize=4096)
def placeholder_shape(shape: tuple[int | str | None, ...], position: int) -> tuple[int, ...]:
    """A shape with each symbolic dim replaced by its placeholder.

    Named dims share one placeholder per name (``batch`` is the same size everywhere); each unnamed dim
    gets its own, keyed by the input ``position`` and the dim's index, so two unknown dims never look equal.
    """
    out: list[int] = []
    for i, d in enumerate(shape):
        if isinstance(d, int) and d >= 0:
            out.append(d)
        elif isinstance(d, str) and d:
            # onnx's shape inference invents unk__N names: one size, but not a name from the model.
            out.append(_placeholder(f"name:{d}", UNNAMED if _INVENTED.fullmatch(d) else d))
        else:
            out.append(_placeholder(f"unnamed:{position}:{i}", UNNAMED))
    return tuple(out)


def is_symbolic(dim: int) -> bool:
    """Whether a dim (or a product of dims) involves a placeholder."""
    return isinstance(dim, SymDim) or (dim >= _FIRST_PLACEHOLDER and bool(_factors(dim)[0]))


def differ(a: int, b: int) -> bool:
    """Whether two dims are known to differ: a placeholder differs from nothing but another name."""
    if a == b:
        return False
    return not (is_symbolic(a) or is_symbolic(b))


def any_differ(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two shapes are known to differ (in rank, or in a dim as :func:`differ` says)."""
    return len(a) != len(b) or any(differ(x, y) for x, y in zip(a, b, strict=True))


def _factors(value: int) -> tuple[list[str], int]:
    """The placeholder names dividing ``value`` (with repeats) and the plain factor left."""
    names: list[str] = []
    rest = value
    if rest < _FIRST_PLACEHOLDER:
        return names, rest
    for prime, name in _NAMES.items():
        while rest >= prime and rest % prime == 0:
            names.append(name)
            rest //= prime
        if rest < _FIRST_PLACEHOLDER:
            break
    return names, rest


def describe(value: int) -> int | str:
    """A value of a symbolic descriptor as people read it: an int, or an expression of dim names."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    names, rest = _factors(value)
    if not names:
        return int(value)
    parts = [*([str(rest)] if rest != 1 else []), *names]
    return "*".join(parts)


def shown_value(value: object) -> object:
    """A rule violation's value with placeholder sizes by name (plain ints and lists of them only: enum
    values keep their type)."""
    if isinstance(value, list):
        return [shown_value(v) for v in value]
    if type(value) is int or type(value) is SymDim:
        return describe(value)
    return value


_SIZE_KEYS = frozenset({"Sizes", "Strides", "sizes", "strides", "onnx_shape", "window", "bounds"})


def render_json(value: Any) -> Any:
    """A node's JSON with every placeholder value shown as its dimension name (or a product of names);
    TotalTensorSizeInBytes of a tensor with symbolic Sizes is ``null`` (it depends on runtime sizes)."""
    if isinstance(value, Mapping):
        out = {k: render_json(v) for k, v in value.items()}
        sizes = out.get("Sizes")
        if (
            "TotalTensorSizeInBytes" in out
            and isinstance(sizes, list)
            and any(isinstance(s, str) for s in sizes)
        ):
            out["TotalTensorSizeInBytes"] = None
        return out
    if isinstance(value, list):
        return [render_json(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return describe(value)
    return value
