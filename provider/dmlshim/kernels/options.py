"""Options and results of the gather/scatter kernels."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..dml.enums import FeatureLevel


class IndexMode(str, enum.Enum):
    """What a kernel does with an index outside the dimension it addresses.

    Attributes:
        ERROR: raise :class:`dmlshim.errors.IndexOutOfRangeError` (ONNX semantics; the default).
        CLAMP: clamp the index into ``[0, size - 1]`` and carry on. DirectML documents "incorrect outputs,
            but no failure; reads are clamped" for gathers, and WebNN clamps; this mode gives a defined
            stand-in for that behaviour, for gathers and scatters alike.
    """

    ERROR = "error"
    CLAMP = "clamp"


@dataclass(frozen=True)
class KernelOptions:
    """How :func:`dmlshim.kernels.execute` runs an operator.

    Attributes:
        feature_level: the DirectML feature level emulated. Only the negative-index rule depends on it
            (negative indices need ``FL_3_0`` and a signed index type); everything else is checked by
            ``dmlshim.dml.validate``.
        index_mode: the out-of-range policy, see :class:`IndexMode`.
        detect_duplicates: count scatter writes that a later write overwrites
            (``KernelResult.duplicate_indices``). Execution is deterministic either way.
        node: the ONNX node name, used in error messages only.
        prove_untouched: scatter ``verify`` only: also prove that every element the scatter does not write
            equals InputTensor; False takes those elements as given (the written ones are still proved).
    """

    feature_level: FeatureLevel = FeatureLevel.FL_5_0
    index_mode: IndexMode = IndexMode.ERROR
    detect_duplicates: bool = True
    node: str | None = None
    prove_untouched: bool = True


@dataclass(frozen=True)
class KernelResult:
    """The output of one kernel run.

    Attributes:
        output: a packed (C-contiguous) array with ``shape == OutputTensor.Sizes`` and the numpy dtype of
            ``OutputTensor.DataType``. The caller owns it.
        duplicate_indices: scatter only: how many writes were overwritten by a later write in index order
            (row-major order over IndicesTensor). Always 0 for gathers and when
            ``KernelOptions.detect_duplicates`` is false.
    """

    output: np.ndarray
    duplicate_indices: int = 0
