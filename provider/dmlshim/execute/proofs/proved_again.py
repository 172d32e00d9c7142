"""A given node proved again from what the lean check fetches of it (issue 36, item 2): its indices'
values and its other inputs' shapes (:mod:`dmlshim.execute.engines.lean_check`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .gather_given import GivenShape
from .scatter_given import scatter_output_is_given, steady_scatter_proof

StandIns = tuple[tuple[Any, ...], list[Any]]
"""Stand-ins of a scatter's inputs (no memory), with the key they were made for."""


def same_inputs(inputs: Sequence[Any], proved_key: tuple[Any, ...]) -> bool:
    """Whether ``inputs`` (per input a value, a shape tuple, or None) have the shapes and dtypes of
    ``proved_key`` (the given run's). A shape carries no dtype: a value's type is the same on every
    run. An OrtValue or anything but a plain array is not proved here."""
    if len(inputs) != len(proved_key) or type(inputs[1]) is not np.ndarray:
        return False
    for value, proved in zip(inputs, proved_key, strict=True):
        if proved is None or value is None:
            if value is not proved:
                return False
        elif type(value) is tuple:
            if value != proved[0]:
                return False
        elif type(value) is not np.ndarray or value.shape != proved[0] or value.dtype != proved[1]:
            return False
    return True


def proved_again(
    op_type: str,
    attrs: Mapping[str, Any],
    proved_key: tuple[Any, ...],
    expected: GivenShape | None,
    indices: np.ndarray,
    stand_ins: StandIns | None,
) -> tuple[bool, StandIns | None]:
    """The given run's proof on this run's ``indices``: a gather's range proof (``expected``), or a
    scatter's (in range, no place written twice: :func:`scatter_output_is_given`, on stand-ins of its
    data and updates, made once per ``proved_key`` and handed back for the next run)."""
    if expected is not None:
        return expected.indices_in_range(indices), stand_ins
    if stand_ins is None or stand_ins[0] is not proved_key:
        made = [None if p is None else np.broadcast_to(np.zeros((), p[1]), p[0]) for p in proved_key]
        stand_ins = (proved_key, made)
    arrays = list(stand_ins[1])
    arrays[1] = indices
    return scatter_output_is_given(op_type, attrs, arrays, arrays[0]), stand_ins


def steady_proof(
    op_type: str, attrs: Mapping[str, Any], proved_key: tuple[Any, ...], expected: GivenShape | None
) -> Callable[[np.ndarray], bool]:
    """:func:`proved_again` on the indices alone, its stand-ins made once: for a run whose inputs have
    the shapes and dtypes ``proved_key`` (the steady lane, :mod:`dmlshim.execute.engines.steady_lane`)."""
    if expected is not None:
        return expected.indices_in_range
    reduced = steady_scatter_proof(op_type, attrs, proved_key)
    if reduced is not None:
        return reduced
    stand_ins = [None if p is None else np.broadcast_to(np.zeros((), p[1]), p[0]) for p in proved_key]

    def proof(indices: np.ndarray) -> bool:
        arrays = list(stand_ins)
        arrays[1] = indices
        return scatter_output_is_given(op_type, attrs, arrays, arrays[0])

    return proof
