"""Execute a translation on ONNX numpy inputs through dmlshim's DirectML kernels.

The runner does exactly what the plan says and nothing else: host steps, reinterpretation, reshape to
Sizes (or the whole buffer for a strided window), the kernel, then the way back to the ONNX output.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, IndexOutOfRangeError, UnsupportedNodeError
from ..kernels import VerifyResult, can_verify, execute, verify
from ..kernels.common import per_object
from ..kernels.options import IndexMode, KernelOptions
from .plan import (
    HostStep,
    HostStepKind,
    InputBinding,
    NodeTranslation,
    OutputBinding,
    Reinterpret,
    Status,
    np_dtype_of,
)

logger = logging.getLogger(__name__)

__all__ = [
    "RunPlan",
    "RunResult",
    "bind_input",
    "index_error_in_onnx_terms",
    "onnx_duplicates",
    "onnx_position",
    "run_plan",
    "run_translation",
    "verify_translation",
]


@dataclass(frozen=True)
class RunResult:
    """The ONNX output of one translated node.

    Attributes:
        output: shaped and typed as the ONNX output.
        duplicate_indices: scatter writes overwritten by a later write (DirectML guarantees no winner).
        host_steps_applied: the kinds of host steps run, in order.
    """

    output: np.ndarray
    duplicate_indices: int
    host_steps_applied: tuple[HostStepKind, ...]


@functools.lru_cache(maxsize=1024)
def _kernel_options(
    feature_level: FeatureLevel, index_mode: IndexMode, node: str, prove_untouched: bool = True
) -> KernelOptions:
    # One per node and mode: the kernels keep what they derive from the options by the options' values.
    return KernelOptions(
        feature_level=feature_level, index_mode=index_mode, node=node, prove_untouched=prove_untouched
    )


def _window_slices(window: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(0, w) for w in window)


def _normalize_indices(
    arr: np.ndarray,
    step: HostStep,
    node: str | None,
    op_type: str | None,
    binding: InputBinding,
    index_mode: IndexMode,
) -> np.ndarray:
    values = arr.astype(np.int64, copy=False)
    if step.per_component:
        bounds = np.asarray(step.bounds, dtype=np.int64).reshape((1,) * (values.ndim - 1) + (-1,))
    else:
        bounds = np.asarray(step.bounds[0], dtype=np.int64)
    bad = (values < -bounds) | (values >= bounds)
    if bad.any():
        if index_mode is IndexMode.CLAMP:
            values = np.clip(np.where(values < 0, values + bounds, values), 0, bounds - 1)
        else:
            pos = tuple(int(p) for p in np.argwhere(bad)[0])
            bound = int(np.broadcast_to(bounds, values.shape)[pos])
            raise IndexOutOfRangeError(
                f"index {int(values[pos])} at position {list(pos)} is outside [-{bound}, {bound - 1}]",
                rule="ONNX: every index must lie within the dimension it addresses",
                value=int(values[pos]),
                node=node,
                op_type=op_type,
                tensor=binding.onnx_name or binding.binding,
            )
    values = np.where(values < 0, values + bounds, values)
    return values.astype(np.uint32)


def fold_batch_into_indices(indices: np.ndarray, bounds: Sequence[int]) -> np.ndarray:
    """Index tuples ``[B..., L..., k]`` (B = ``bounds[:-1]``) as ``[N, L..., k]``, the first coordinate of
    each offset by its flat batch position times ``bounds[-1]``."""
    batch_dims = len(bounds) - 1
    n = math.prod(indices.shape[:batch_dims])
    folded = indices.reshape((n, *indices.shape[batch_dims:])).astype(np.int64)
    offsets = np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (folded.ndim - 2)) * int(bounds[-1])
    folded[..., 0] += offsets
    return folded.astype(indices.dtype, copy=False)


def bind_input(
    arr: np.ndarray,
    binding: InputBinding,
    t: NodeTranslation | None = None,
    index_mode: IndexMode = IndexMode.ERROR,
    applied: list[HostStepKind] | None = None,
) -> np.ndarray:
    """Apply a plan binding's host-side preparation to an ONNX input: the array the DirectML operator reads.

    Args:
        arr: the ONNX input value.
        binding: the binding of the translation's plan.
        t: the translation, to name the node in errors.
        index_mode: out-of-range policy of the index normalisation step.
        applied: if given, the host steps applied are appended to it.

    Returns:
        The buffer in DirectML Sizes (flat for a strided tensor), bool as uint8, 64-bit data as UINT32
        pairs, indices in the descriptor's index type.

    Raises:
        BadInputError: the array is not the shape/type the translation was made for, or indices do not
            fit the descriptor's index type.
        IndexOutOfRangeError: an index outside its dimension (checked by the normalisation step).
    """
    node, op_type = (t.name, t.op_type) if t is not None else (None, None)
    expected = np_dtype_of(binding.onnx_elem_type)
    if arr.shape != binding.onnx_shape or arr.dtype != expected:
        raise BadInputError(
            f"{binding.onnx_name or binding.binding} is {arr.dtype}{list(arr.shape)}, the translation was "
            f"made for {expected}{list(binding.onnx_shape)}",
            node=node,
            op_type=op_type,
            tensor=binding.onnx_name or binding.binding,
        )
    for step in binding.host_steps:
        if step.kind is HostStepKind.NORMALIZE_INDICES:
            arr = _normalize_indices(arr, step, node, op_type, binding, index_mode)
        elif step.kind is HostStepKind.DUPLICATE_FOR_PAIRS:
            arr = np.repeat(arr[..., np.newaxis], 2, axis=-1)
        elif step.kind is HostStepKind.FOLD_BATCH_INTO_INDICES:
            arr = fold_batch_into_indices(arr, step.bounds)
        if applied is not None:
            applied.append(step.kind)
    tensor = binding.tensor
    strided = tensor.strides is not None
    if binding.window is not None and not strided:
        arr = arr[_window_slices(binding.window)]
    arr = np.ascontiguousarray(arr)
    if binding.reinterpret is Reinterpret.BOOL_AS_UINT8:
        arr = arr.view(np.uint8)
    elif binding.reinterpret is Reinterpret.UINT32_PAIRS:
        arr = arr.reshape((*arr.shape, 1)).view(np.uint32)
    target = tensor.data_type.numpy_dtype
    if arr.dtype != target and binding.binding == "IndicesTensor":
        arr = _cast_indices(arr, target, binding, node, op_type)
    if strided:
        return arr.reshape(-1)
    return arr.reshape(tensor.sizes)


def _cast_indices(
    arr: np.ndarray, target: np.dtype, binding: InputBinding, node: str | None, op_type: str | None
) -> np.ndarray:
    if arr.dtype.kind not in "iu" or target.kind not in "iu":
        raise BadInputError(
            f"{arr.dtype} indices cannot be bound to a {binding.tensor.data_type.dml_name} tensor",
            node=node,
            op_type=op_type,
            tensor=binding.binding,
        )
    info = np.iinfo(target)
    # A wrapped index would silently address another element.
    if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
        raise BadInputError(
            f"indices do not fit {binding.tensor.data_type.dml_name}",
            node=node,
            op_type=op_type,
            tensor=binding.binding,
            value=str(arr.dtype),
        )
    return arr.astype(target)


def _unbind_output(
    out: np.ndarray, binding: OutputBinding, inputs: Sequence[np.ndarray | None], applied: list[HostStepKind]
) -> np.ndarray:
    dtype = np_dtype_of(binding.onnx_elem_type)
    if binding.reinterpret is Reinterpret.UINT32_PAIRS:
        result = np.ascontiguousarray(out).reshape((*binding.view_shape, 2)).view(dtype)
        result = result.reshape(binding.view_shape)
    elif binding.reinterpret is Reinterpret.BOOL_AS_UINT8:
        # DirectML moves bool as its bytes: a byte that is neither 0 nor 1 stays as it came, as in onnxruntime
        result = out.reshape(binding.view_shape).view(np.bool_)
    else:
        result = out.reshape(binding.view_shape).astype(dtype, copy=False)
    for step in binding.host_steps:
        if step.kind is HostStepKind.WRITE_BACK_WINDOW:
            data = inputs[0]
            assert data is not None  # checked when binding the inputs
            full = np.array(data, copy=True)
            full[_window_slices(step.window)] = result
            result = full
        applied.append(step.kind)
    return result


def onnx_position(binding: InputBinding, position: Sequence[int]) -> tuple[int, ...] | None:
    """The position in the ONNX indices of an element found at ``position`` of IndicesTensor, when the
    tensor is a plain reshape of the ONNX indices (no window, no strides, no pair duplication)."""
    tensor = binding.tensor
    if (
        binding.window is not None
        or tensor.strides is not None
        or any(s.kind is HostStepKind.DUPLICATE_FOR_PAIRS for s in binding.host_steps)
        or binding.reinterpret is not Reinterpret.NONE
        or len(position) != tensor.dimension_count
        or math.prod(binding.onnx_shape) != tensor.element_count
        or tensor.element_count == 0
    ):
        return None
    flat = int(np.ravel_multi_index(tuple(int(p) for p in position), tensor.sizes))
    if not binding.onnx_shape:
        return ()
    return tuple(int(p) for p in np.unravel_index(flat, binding.onnx_shape))


def _in_onnx_terms(exc: IndexOutOfRangeError, t: NodeTranslation) -> IndexOutOfRangeError:
    """The kernel's error restated for the ONNX node: its op, its indices tensor, ONNX coordinates."""
    binding = next((b for b in t.inputs if b.binding == "IndicesTensor"), None)
    position = getattr(exc, "position", None)
    if binding is None or position is None:
        return exc
    return index_error_in_onnx_terms(
        exc,
        node=t.name,
        op_type=t.op_type,
        tensor=binding.onnx_name,
        onnx_position=onnx_position(binding, position),
        dml_op=t.operator.operator_type.dml_name if t.operator else "DirectML",
    )


def index_error_in_onnx_terms(
    exc: IndexOutOfRangeError,
    *,
    node: str | None,
    op_type: str,
    tensor: str,
    onnx_position: Sequence[int] | None,
    dml_op: str,
) -> IndexOutOfRangeError:
    """A kernel's out-of-range error (DirectML terms: IndicesTensor, its position) restated for the ONNX
    node ``node`` of ``op_type``: its indices tensor ``tensor`` and, where known, the ONNX position."""
    position = getattr(exc, "position", None)
    valid = getattr(exc, "valid_range", None)
    if position is None or valid is None:
        return exc
    where = f"{tensor}{list(onnx_position)}" if onnx_position is not None else tensor
    message = (
        f"index {exc.value} at {where} is out of range: valid range [{valid[0]}, {valid[1]}] for a dimension "
        f"of size {getattr(exc, 'size', '?')} ({dml_op} sees it at IndicesTensor{list(position)})"
    )
    err = IndexOutOfRangeError(
        message, rule=exc.rule, value=exc.value, node=node, op_type=op_type, tensor=tensor
    )
    err.position = tuple(onnx_position) if onnx_position is not None else tuple(position)  # type: ignore[attr-defined]
    err.valid_range = tuple(valid)  # type: ignore[attr-defined]
    return err


class RunPlan:
    """What :func:`run_translation` derives from a translation alone (its shapes, dtypes and bindings),
    computed once per translation object: a translation is made for one set of input shapes and dtypes,
    so this is the compiled per-shape plan of the node. Value-dependent work (index range checks,
    negative indices, duplicate counting) is not part of it and runs on every call.

    Attributes:
        inputs: per binding ``(binding, onnx_index, shape, dtype, sizes, as_bytes)``; ``sizes`` is the
            DirectML Sizes to reshape to when the binding needs nothing else (no host step, window,
            strides or index cast; at most bool viewed as UINT8: ``as_bytes``), else None (the full
            :func:`bind_input` runs).
        output_shape: the ONNX output shape when the output needs only a reshape, else None.
        output_dtype: the ONNX output dtype.
        output_bool: the output is bool moved as UINT8 (converted back after the kernel).
        pairs: 64-bit data moved as UINT32 pairs (duplicate counts are halved).
    """

    __slots__ = ("inputs", "output_bool", "output_dtype", "output_shape", "pairs")

    def __init__(self, t: NodeTranslation) -> None:
        assert t.output is not None
        entries = []
        for b in t.inputs:
            dtype = np_dtype_of(b.onnx_elem_type)
            plain = (
                not b.host_steps
                and b.window is None
                and b.tensor.strides is None
                and b.reinterpret in (Reinterpret.NONE, Reinterpret.BOOL_AS_UINT8)
                and (b.binding != "IndicesTensor" or b.tensor.data_type.numpy_dtype == dtype)
                and math.prod(b.tensor.sizes) == math.prod(b.onnx_shape)
            )
            as_bytes = b.reinterpret is Reinterpret.BOOL_AS_UINT8
            sizes = tuple(b.tensor.sizes) if plain else None
            entries.append((b, b.onnx_index, tuple(b.onnx_shape), dtype, sizes, as_bytes))
        self.inputs = tuple(entries)
        out = t.output
        self.output_dtype = np_dtype_of(out.onnx_elem_type)
        plain_out = out.reinterpret in (Reinterpret.NONE, Reinterpret.BOOL_AS_UINT8) and not out.host_steps
        self.output_shape = tuple(out.view_shape) if plain_out else None
        self.output_bool = out.reinterpret is Reinterpret.BOOL_AS_UINT8
        self.pairs = any(s.kind is HostStepKind.DUPLICATE_FOR_PAIRS for b in t.inputs for s in b.host_steps)


@per_object
def run_plan(t: NodeTranslation) -> RunPlan:
    """The :class:`RunPlan` of a ``dml`` translation, kept for as long as the translation lives."""
    return RunPlan(t)


def _plain_binding(arr: np.ndarray, sizes: tuple[int, ...], as_bytes: bool) -> np.ndarray:
    """``arr`` at the binding's ``sizes``: a read-only non-contiguous array (a transposed weight,
    :mod:`dmlshim.execute.weights.layout_views`) stays a view where numpy can give it those sizes without a
    copy (the kernels read it through its strides, :func:`dmlshim.kernels.buffers.view_tensor`); otherwise
    a contiguous array (copied if need be: a kernel's packed path is faster than its strided one when the
    array is small enough to copy each run, as a program's feeds are)."""
    if not arr.flags.c_contiguous and not arr.flags.writeable and not as_bytes:
        view = arr.view()
        try:
            view.shape = sizes  # AttributeError where only a copy has that shape
        except AttributeError:
            pass
        else:
            return view
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return (arr.view(np.uint8) if as_bytes else arr).reshape(sizes)


def _bound(
    t: NodeTranslation,
    plan: RunPlan,
    inputs: Sequence[np.ndarray | None],
    index_mode: IndexMode,
    applied: list[HostStepKind],
    prove_untouched: bool = True,
) -> tuple[dict[str, np.ndarray], KernelOptions]:
    """The kernel's arguments for ``inputs``: the arrays by binding name (host steps applied) and the
    options."""
    bound: dict[str, np.ndarray] = {}
    count = len(inputs)
    for binding, index, shape, dtype, sizes, as_bytes in plan.inputs:
        arr = inputs[index] if index < count else None
        if arr is None:
            raise BadInputError(
                f"input {binding.onnx_index} ({binding.onnx_name}) is missing", node=t.name, op_type=t.op_type
            )
        if sizes is not None and type(arr) is np.ndarray and arr.shape == shape and arr.dtype == dtype:
            # The plain binding: bind_input would only reshape (copying a non-contiguous array first).
            bound[binding.binding] = _plain_binding(arr, sizes, as_bytes)
        else:
            bound[binding.binding] = bind_input(np.asarray(arr), binding, t, index_mode, applied)
    try:
        options = _kernel_options(t.feature_level, index_mode, t.name, prove_untouched)
    except TypeError:  # an unhashable index_mode: the kernel rejects it
        options = KernelOptions(
            feature_level=t.feature_level, index_mode=index_mode, node=t.name, prove_untouched=prove_untouched
        )
    return bound, options


def _require_dml(t: NodeTranslation) -> None:
    if t.status is not Status.DML or t.operator is None or t.output is None:
        codes = ", ".join(t.reason_codes) or "none"
        raise UnsupportedNodeError(
            f"the node was not translated to DirectML (status {t.status.value}; reasons: {codes})",
            node=t.name,
            op_type=t.op_type,
        )


def run_translation(
    t: NodeTranslation, inputs: Sequence[np.ndarray | None], *, index_mode: IndexMode = IndexMode.ERROR
) -> RunResult:
    """Run a translated node on ONNX inputs through the DirectML kernels.

    Args:
        t: a translation with status ``dml``.
        inputs: the ONNX node's inputs, in node order (data, indices[, updates]).
        index_mode: out-of-range policy (ERROR: ONNX semantics, raises IndexOutOfRangeError).

    Returns:
        The ONNX-shaped, ONNX-typed output.

    Raises:
        UnsupportedNodeError: the translation's status is not ``dml``.
        BadInputError: an input does not match the shapes/types the translation was made for.
        IndexOutOfRangeError: an index outside its dimension (index_mode ERROR).
    """
    if t.status is not Status.DML or t.operator is None or t.output is None:
        _require_dml(t)
    assert t.operator is not None and t.output is not None
    plan = run_plan(t)
    applied: list[HostStepKind] = []
    bound, options = _bound(t, plan, inputs, index_mode, applied)
    try:
        result = execute(t.operator, bound, options)
    except IndexOutOfRangeError as exc:
        raise _in_onnx_terms(exc, t) from exc
    if plan.output_shape is not None:
        output = result.output.reshape(plan.output_shape)
        output = output.view(np.bool_) if plan.output_bool else output.astype(plan.output_dtype, copy=False)
    else:
        output = _unbind_output(result.output, t.output, inputs, applied)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s: ran %s with host steps %s", t.name, t.operator.operator_type.dml_name, applied)
    duplicates = int(result.duplicate_indices)
    return RunResult(output, duplicates // 2 if plan.pairs else duplicates, tuple(applied))


def verify_translation(
    t: NodeTranslation,
    inputs: Sequence[np.ndarray | None],
    expected: object,
    *,
    index_mode: IndexMode = IndexMode.ERROR,
    prove_untouched: bool = True,
) -> VerifyResult | None:
    """Whether ``expected`` (onnxruntime's output of the node, say) is, bit for bit, the output
    :func:`run_translation` would return for the same arguments, and the duplicate count it would report,
    without computing that output (see :mod:`dmlshim.kernels.scatter_verify`). With ``prove_untouched``
    False, the elements the scatter does not write are taken as given.

    Returns:
        The verdict; None when the translation has no such check (not a scatter, or an output that needs
        more than a reshape on the way back) and :func:`run_translation` must run instead. An
        ``expected`` of another shape or dtype never agrees.

    Raises:
        What :func:`run_translation` raises for the same arguments.
    """
    _require_dml(t)
    operator = t.operator
    assert operator is not None
    if not can_verify(operator):
        return None
    plan = run_plan(t)
    dtype = operator.output_tensor.data_type.numpy_dtype
    if plan.output_shape is None or not (plan.output_bool or dtype == plan.output_dtype):
        return None
    onnx_dtype = np.dtype(np.bool_) if plan.output_bool else plan.output_dtype
    if not isinstance(expected, np.ndarray):
        return VerifyResult(False)
    if expected.shape != plan.output_shape or expected.dtype != onnx_dtype:
        return VerifyResult(False)
    bound, options = _bound(t, plan, inputs, index_mode, [], prove_untouched)
    flat = np.ascontiguousarray(expected).reshape(-1)
    try:
        result = verify(operator, bound, flat.view(np.uint8) if plan.output_bool else flat, options)
    except IndexOutOfRangeError as exc:
        raise _in_onnx_terms(exc, t) from exc
    duplicates = result.duplicate_indices
    return VerifyResult(result.agrees, duplicates // 2 if plan.pairs else duplicates)


def onnx_duplicates(t: NodeTranslation, kernel_count: int) -> int:
    """The kernel's count of overwritten writes in ONNX elements: with 64-bit data moved as UINT32 pairs
    (indices repeated for both halves), every overwritten ONNX element is two overwritten UINT32 writes."""
    pairs = any(s.kind is HostStepKind.DUPLICATE_FOR_PAIRS for b in t.inputs for s in b.host_steps)
    return kernel_count // 2 if pairs else kernel_count
