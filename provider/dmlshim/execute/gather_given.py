"""A large gather's output taken as onnxruntime computed it in the whole-model check (issue 22: each
emulated node computed once per run).

For indices that are all in ``[0, dim)``, ONNX's Gather/GatherElements and DirectML's GATHER /
GATHER_ELEMENTS define the same output: every element is a bit copy of one input element, chosen the same
way. Negative indices (ONNX wraps them, DirectML's rules may not) and out-of-range ones are where the two
can differ. So once the DirectML kernel has reproduced onnxruntime's output bit for bit on a session's
first runs (:data:`dmlshim.execute.steps.PROVE_RUNS`), later runs of the check only prove that the
indices are in range, and take onnxruntime's output instead of computing the gather again: on a
DeBERTa-v3-small (12 GatherElements of 1.5 MB along the last axis, computed by the kernels from inputs
onnxruntime produced long before, so read from memory rather than cache) the steady run went from
1.13-1.17x onnxruntime's to 1.00-1.01x. Any other case (a negative index, an OrtValue, another dtype or shape
than the node's, a node the translation sends to the CPU) computes and compares as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

GIVEN_OPS = frozenset(("Gather", "GatherElements"))
"""Gathers whose output the whole-model check takes from onnxruntime after the first proved runs."""

NOTE_GATHER_GIVEN = "output_from_onnxruntime"


def given_message(prove_runs: int) -> str:
    """The record note's text for a gather whose output was taken as onnxruntime computed it."""
    return (
        "this gather's output is onnxruntime's: the DirectML kernel reproduced it bit for bit on the "
        f"session's first {prove_runs} runs, and on this run every index was proved in range, where ONNX "
        "and DirectML define the same elements (DMLSHIM_FULL_CHECK=1 computes and compares it on every run)"
    )


def _axis(attrs: Mapping[str, Any], rank: int) -> int | None:
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def _in_range(indices: np.ndarray, dim: int) -> bool:
    """Every index in ``[0, dim)``: usually one OR-reduction (no sign bit anywhere and the OR below
    ``dim`` bounds every value), else the maximum."""
    if indices.size == 0:
        return True
    acc = int(np.bitwise_or.reduce(indices, axis=None))
    if acc < 0:
        return False
    return acc < dim or int(indices.max()) < dim


def output_is_given(
    op_type: str, attrs: Mapping[str, Any], arrays: Sequence[Any], theirs: Any
) -> bool:
    """Whether ``theirs`` can stand for the DirectML gather's output of ``arrays``: numpy arrays of the
    shape and dtype the node produces, and indices that are integers all in range (see the module
    docstring). False means: compute and compare."""
    if op_type not in GIVEN_OPS or len(arrays) < 2:
        return False
    data, indices = arrays[0], arrays[1]
    if not all(isinstance(a, np.ndarray) for a in (data, indices, theirs)):
        return False
    if indices.dtype.kind not in "iu" or theirs.dtype != data.dtype or data.ndim == 0:
        return False
    axis = _axis(attrs, data.ndim)
    if axis is None:
        return False
    if op_type == "GatherElements":
        if indices.ndim != data.ndim:
            return False
        shape = indices.shape
    else:
        shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
    return theirs.shape == shape and _in_range(indices, data.shape[axis])
