"""Numpy execution of the DirectML gather/scatter operators, following the DirectML reference pages.

``execute(desc, inputs, options)`` runs one of DML_OPERATOR_GATHER, GATHER_ELEMENTS, GATHER_ND,
GATHER_ND1, SCATTER (= SCATTER_ELEMENTS) and SCATTER_ND on arrays bound by DirectML binding name
(``InputTensor``, ``IndicesTensor``, ``UpdatesTensor``). Each array is either shaped like its tensor's
Sizes or a 1-D buffer read through Sizes and Strides (see :mod:`dmlshim.kernels.buffers`).

Where DirectML leaves behaviour undefined, the kernels pick one documented answer:

* an out-of-range index raises :class:`dmlshim.errors.IndexOutOfRangeError` (``IndexMode.ERROR``) or is
  clamped into ``[0, size-1]`` (``IndexMode.CLAMP``);
* negative indices count from the end only for signed index types at ``FL_3_0`` and later;
* when scatter writes overlap, the last write in row-major index order wins and the overwritten writes
  are counted in ``KernelResult.duplicate_indices``.

The numpy kernels here are the reference; when numba is installed (the ``fast`` extra) the compiled
kernels of :mod:`dmlshim.kernels.compiled` run instead and give the same results bit for bit, handing
back to the numpy kernel every case they do not take (``DMLSHIM_KERNELS=numpy|compiled`` chooses).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from ..dml.operators import (
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    GatherNdDesc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
)
from ..errors import DmlShimError, InvalidDescriptorError
from . import compiled, gather, gather_elements, gather_nd, scatter_elements, scatter_nd
from .indices import KernelIndexError
from .options import IndexMode, KernelOptions, KernelResult
from .scatter_verify import VerifyResult

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

DEFAULT_OPTIONS = KernelOptions()
"""The default options (frozen, so one shared instance is safe)."""

_KERNELS: dict[type, Callable[[Any, Mapping[str, Any], KernelOptions], KernelResult]] = {
    GatherDesc: gather.run,
    GatherElementsDesc: gather_elements.run,
    GatherNdDesc: gather_nd.run,
    GatherNd1Desc: gather_nd.run,
    ScatterDesc: scatter_elements.run,
    ScatterNdDesc: scatter_nd.run,
}
"""The kernel of each descriptor type."""


def execute(
    desc: OperatorDesc,
    inputs: Mapping[str, np.ndarray],
    options: KernelOptions = DEFAULT_OPTIONS,
    *,
    kernels: str | None = None,
) -> KernelResult:
    """Run one DirectML gather/scatter operator on numpy arrays.

    Args:
        desc: the operator descriptor (one of the six ``dmlshim.dml.operators`` types).
        inputs: arrays by DirectML binding name: ``InputTensor``, ``IndicesTensor`` and, for scatters,
            ``UpdatesTensor``. Each is either shaped exactly like the tensor's Sizes with the DataType's
            numpy dtype (``bool`` is accepted for UINT8), or a 1-D buffer of at least
            ``buffer_element_count`` elements viewed through Sizes and Strides; a 1-D buffer of another
            dtype has its bytes reinterpreted. A bound ``OutputTensor`` is ignored. The arrays are
            never modified.
        options: feature level, out-of-range policy, duplicate detection and the node name for messages.
        kernels: ``"numpy"`` or ``"compiled"`` to choose the kernels for this call; None (the default)
            uses the ones DMLSHIM_KERNELS selects (see :mod:`dmlshim.kernels.compiled`).

    Returns:
        The packed output (``shape == OutputTensor.Sizes``) and, for scatters, the number of overwritten
        duplicate writes.

    Raises:
        InvalidDescriptorError: the descriptor cannot be executed (binding names, DimensionCounts, Sizes
            relations, DataTypes, Axis or count fields out of range).
        BadInputError: an input array does not fit its tensor.
        IndexOutOfRangeError: an index outside its dimension (``IndexMode.ERROR``), or a negative index
            where negatives are not allowed; the message names the node, the operator, IndicesTensor, the
            position, the value and the valid range.
        EngineUnavailableError: ``kernels="compiled"`` without numba.
    """
    kernel = _KERNELS.get(type(desc)) or _entry(_KERNELS, desc, options, "kernel")
    fast = compiled.kernel_for(type(desc), kernels, getattr(desc.output_tensor, "element_count", 0))
    # try/except rather than _node_named: a generator context manager costs ~2 us per small call
    try:
        if fast is not None:
            result: KernelResult | None = fast(desc, inputs, options)
            if result is not None:
                return result
        return kernel(desc, inputs, options)
    except DmlShimError as e:
        if e.node is None:
            e.node = options.node
        raise


def _entry(table: Mapping[type, _T], desc: OperatorDesc, options: KernelOptions, what: str) -> _T:
    """``table``'s entry for the descriptor's type, or InvalidDescriptorError naming the types it has."""
    found = table.get(type(desc))
    if found is None:
        raise InvalidDescriptorError(
            f"no {what} for descriptor type {type(desc).__name__}; expected one of "
            f"{sorted(t.__name__ for t in table)}",
            node=options.node,
            value=type(desc).__name__,
        )
    return found


@contextlib.contextmanager
def _node_named(options: KernelOptions) -> Iterator[None]:
    """Errors raised inside name the node of ``options`` when they name none."""
    try:
        yield
    except DmlShimError as e:
        if e.node is None:
            e.node = options.node
        raise


_VERIFIERS: dict[type, Callable[[Any, Mapping[str, Any], np.ndarray, KernelOptions], VerifyResult]] = {
    ScatterDesc: scatter_elements.verify,
    ScatterNdDesc: scatter_nd.verify,
}
"""The scatter kernels' verify entry points (see :mod:`dmlshim.kernels.scatter_verify`)."""


def can_verify(desc: OperatorDesc) -> bool:
    """Whether :func:`verify` takes ``desc`` (the scatters)."""
    return type(desc) in _VERIFIERS


def verify(
    desc: OperatorDesc,
    inputs: Mapping[str, np.ndarray],
    expected: np.ndarray,
    options: KernelOptions = DEFAULT_OPTIONS,
) -> VerifyResult:
    """Whether ``expected`` is, bit for bit, the output :func:`execute` would return for the same
    arguments, without computing that output (see :mod:`dmlshim.kernels.scatter_verify`).

    Args:
        desc: a SCATTER or SCATTER_ND descriptor (see :func:`can_verify`).
        inputs: as for :func:`execute`.
        expected: the array to check, with OutputTensor's numpy dtype and element count (any shape: it
            is read flat, in C order); another dtype or size never agrees.
        options: as for :func:`execute`.

    Returns:
        The verdict and the duplicate count :func:`execute` would report.

    Raises:
        Exactly what :func:`execute` raises for the same arguments; InvalidDescriptorError for a
        descriptor that has no verify.
    """
    verifier = _entry(_VERIFIERS, desc, options, "verify")
    with _node_named(options):
        return verifier(desc, inputs, np.asarray(expected).reshape(-1), options)


__all__ = [
    "IndexMode",
    "KernelIndexError",
    "KernelOptions",
    "KernelResult",
    "VerifyResult",
    "can_verify",
    "execute",
    "verify",
]
