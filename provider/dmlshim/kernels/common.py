"""Structural checks every kernel needs before it can run, and the shared binding step.

These are only the relations a kernel cannot run without (binding names, one DimensionCount, Sizes
formulas, matching DataTypes). Feature-level rules live in ``dmlshim.dml.validate``.

A check that passed for a descriptor is not repeated: descriptors are frozen, so what they establish is
kept per descriptor object (:func:`per_object`) for as long as it lives. Checks on the bound arrays (their
shapes, dtypes, index values) run on every call.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, NoReturn, TypeVar

import numpy as np

from ..dml.enums import DataType, FeatureLevel
from ..dml.operators import OperatorDesc
from ..dml.tensor import BufferTensorDesc
from ..errors import BadInputError, InvalidDescriptorError
from .buffers import TensorView, packed_dtype, view_tensor
from .indices import IndexContext
from .options import IndexMode, KernelOptions

logger = logging.getLogger(__name__)

INDEX_DATA_TYPES = (DataType.INT32, DataType.INT64, DataType.UINT32, DataType.UINT64)
"""What IndicesTensor.DataType may be (the DirectML tensor-support tables, FL 3_0 and later)."""


def fail(desc: OperatorDesc, message: str, *, field: str | None = None, value: Any = None) -> NoReturn:
    """Raise InvalidDescriptorError about ``desc`` naming the operator and the field."""
    raise InvalidDescriptorError(
        message, op_type=desc.operator_type.dml_name, tensor=field, value=value, rule=None
    )


_K = TypeVar("_K")
_V = TypeVar("_V")


class per_object(Generic[_K, _V]):  # a decorator, named like functools.cache
    """Memoise a one-argument function by the identity of its argument, for as long as the argument lives.

    For frozen descriptors and translations: hashing one (every field, recursively) costs about as much as
    the checks the cache saves; its identity costs nothing. An exception is not remembered.
    """

    def __init__(self, compute: Callable[[_K], _V]) -> None:
        self._compute = compute
        self._entries: dict[int, tuple[weakref.ref[Any], _V]] = {}

    def __call__(self, obj: _K) -> _V:
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        value = self._compute(obj)
        entries = self._entries

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(obj, forget), value)
        return value

    def cache_clear(self) -> None:
        self._entries.clear()


class _Checked:
    """What the structural checks of one descriptor established."""

    __slots__ = ("contexts", "derived", "inputs", "packed", "passed", "prepared", "tensors")

    def __init__(self, desc: OperatorDesc) -> None:
        self.tensors: dict[str, BufferTensorDesc] = desc.tensors()
        self.inputs = tuple((name, self.tensors[name]) for name in desc.INPUT_TENSOR_FIELDS)
        # What view_tensor's packed fast path compares, per input: (name, tensor, dtype, sizes, strides).
        self.packed = tuple(
            (name, t, packed_dtype(t.data_type), t.sizes, t.packed_strides) for name, t in self.inputs
        )
        # Checks already passed, by (check, arguments); and IndexContexts by the options they came from.
        self.passed: set[tuple[Any, ...]] = set()
        self.contexts: dict[tuple[Any, ...], IndexContext] = {}
        # What a kernel derived from the descriptor alone (its checks passed), by the deriving function.
        self.derived: dict[Callable[[Any], Any], Any] = {}
        # (IndexContext, layout) by (options, target, layout function): see prepared().
        self.prepared: dict[tuple[Any, ...], tuple[IndexContext, Any]] = {}


@per_object
def _checked(desc: OperatorDesc) -> _Checked:
    """The tensor checks of :func:`bind` (raising, and then not remembered, when one fails)."""
    tensors = desc.tensors()
    for name, tensor in tensors.items():
        if not isinstance(tensor, BufferTensorDesc):
            fail(desc, f"{name} is not a DML_BUFFER_TENSOR_DESC (got {type(tensor).__name__})", field=name)
        if tensor.strides is not None and len(tensor.strides) != len(tensor.sizes):
            fail(
                desc,
                f"{name}.Strides has {len(tensor.strides)} entries but Sizes has {len(tensor.sizes)}",
                field=name,
                value=tensor.strides,
            )
        if any(s < 0 for s in tensor.sizes) or any(s < 0 for s in tensor.effective_strides):
            fail(desc, f"{name} has a negative size or stride", field=name, value=tensor.sizes)
    counts = {name: t.dimension_count for name, t in tensors.items()}
    if len(set(counts.values())) != 1:
        listing = ", ".join(f"{n} {c}" for n, c in counts.items())
        fail(desc, f"all tensors must share one DimensionCount; got {listing}", value=counts)
    if next(iter(counts.values())) == 0:
        fail(desc, "DimensionCount must be at least 1", value=0)
    return _Checked(desc)


_D = TypeVar("_D", bound=OperatorDesc)


def derived(desc: _D, compute: Callable[[_D], _V]) -> _V:
    """``compute(desc)``, computed once per descriptor object: for a kernel's structural checks and the
    layout constants they establish (the kernel's compiled plan for this descriptor). A check that
    raises is not remembered, so a bad descriptor raises the same error on every call."""
    table = _checked(desc).derived
    found = table.get(compute, _MISSING)
    if found is _MISSING:
        found = table[compute] = compute(desc)
    return found


_MISSING = object()


def prepared(
    desc: _D,
    options: KernelOptions,
    target: str,
    same_types: tuple[str, ...],
    layout: Callable[[_D], _V],
) -> tuple[IndexContext, _V]:
    """A kernel's whole per-descriptor preparation in one lookup: the DataType check of ``same_types``,
    the IndexContext under ``options`` (addressing ``target``) and ``derived(desc, layout)``, run in that
    order the first time (so a bad descriptor raises what it always raised) and then remembered."""
    table = _checked(desc).prepared
    try:
        key = (options, target, layout)
        found = table.get(key)
    except TypeError:  # unhashable option values: let the checks reject them
        key, found = None, None
    if found is not None:
        return found
    require_same_data_type(desc, *same_types)
    ctx = index_context(desc, options, target)
    result = (ctx, derived(desc, layout))
    if key is not None:
        table[key] = result
    return result


def bind(desc: OperatorDesc, inputs: Mapping[str, Any]) -> dict[str, TensorView]:
    """Check the descriptor's tensors and the binding names, and view every input array.

    ``OutputTensor`` may appear in ``inputs`` (a runner binding every buffer) and is ignored.

    Raises:
        InvalidDescriptorError: a tensor field is missing or malformed, DimensionCounts differ, a binding
            name is unknown, or an input is not bound.
        BadInputError: an input array cannot be viewed as its tensor.
    """
    checked = _checked(desc)
    fields = desc.INPUT_TENSOR_FIELDS
    extra = len(inputs) - len(fields)
    if not ((extra == 0 or (extra == 1 and "OutputTensor" in inputs)) and all(n in inputs for n in fields)):
        _check_names(desc, inputs)
    if extra:
        logger.debug("%s: ignoring the bound OutputTensor", desc.operator_type.dml_name)
    views: dict[str, TensorView] = {}
    for name, tensor, dtype, sizes, strides in checked.packed:
        array = inputs[name]
        if (
            type(array) is np.ndarray
            and array.dtype == dtype
            and array.shape == sizes
            and array.flags.c_contiguous
        ):
            # view_tensor's packed case, without its per-call lookups.
            flat = array.reshape(-1)
            flat.flags.writeable = False
            views[name] = TensorView(name, tensor, flat, strides, True)
        else:
            views[name] = view_tensor(desc, name, tensor, array)
    return views


def _check_names(desc: OperatorDesc, inputs: Mapping[str, Any]) -> None:
    """Raise about the binding names that are unknown or missing."""
    allowed = set(desc.INPUT_TENSOR_FIELDS)
    unknown = sorted(set(inputs) - allowed - {"OutputTensor"})
    if unknown:
        fail(
            desc,
            f"unknown binding name(s) {unknown}; {desc.operator_type.dml_name} binds "
            f"{list(desc.INPUT_TENSOR_FIELDS)}",
            value=unknown,
        )
    missing = [n for n in desc.INPUT_TENSOR_FIELDS if n not in inputs]
    if missing:
        fail(desc, f"input(s) {missing} are not bound", field=missing[0], value=missing)


def require_same_data_type(desc: OperatorDesc, *names: str) -> None:
    """All named tensors must have the DataType of the first one."""
    checked = _checked(desc)
    if names in checked.passed:
        return
    tensors = checked.tensors
    first = tensors[names[0]].data_type
    for name in names[1:]:
        other = tensors[name].data_type
        if other != first:
            fail(
                desc,
                f"{name}.DataType {other.dml_name} must match {names[0]}.DataType {first.dml_name}",
                field=name,
                value=other.dml_name,
            )
    checked.passed.add(names)


def require_sizes(desc: OperatorDesc, name: str, expected: tuple[int, ...], why: str) -> None:
    """``name``'s Sizes must equal ``expected``."""
    actual = _checked(desc).tensors[name].sizes
    if tuple(actual) != tuple(expected):
        fail(
            desc,
            f"{name}.Sizes {list(actual)} must be {list(expected)} ({why})",
            field=name,
            value=list(actual),
        )


def require_leading_ones(desc: OperatorDesc, name: str, meaningful: int, count_field: str) -> None:
    """Dimensions before the last ``meaningful`` ones are padding and must be 1."""
    checked = _checked(desc)
    key = ("leading_ones", name, meaningful)
    if key in checked.passed:
        return
    sizes = checked.tensors[name].sizes
    lead = sizes[: len(sizes) - meaningful]
    if any(s != 1 for s in lead):
        fail(
            desc,
            f"{name}.Sizes {list(sizes)}: only the last {count_field} = {meaningful} dimensions are "
            f"meaningful, so the leading ones must be 1",
            field=name,
            value=list(sizes),
        )
    checked.passed.add(key)


def index_context(desc: OperatorDesc, options: KernelOptions, target: str) -> IndexContext:
    """The IndexContext of ``desc`` under ``options``, after checking IndicesTensor.DataType."""
    checked = _checked(desc)
    key = (options.feature_level, options.index_mode, options.node, target)
    try:
        found = checked.contexts.get(key)
        cacheable = True
    except TypeError:  # an unhashable option value: let the checks below reject it
        found, cacheable = None, False
    if found is not None:
        return found
    data_type = checked.tensors["IndicesTensor"].data_type
    if data_type not in INDEX_DATA_TYPES:
        allowed = ", ".join(t.name for t in INDEX_DATA_TYPES)
        fail(
            desc,
            f"IndicesTensor.DataType {data_type.dml_name} is not an index type ({allowed})",
            field="IndicesTensor",
            value=data_type.dml_name,
        )
    try:
        # Plain values ("clamp", 0x3000) are accepted: the enums compare by identity below.
        mode = IndexMode(options.index_mode)
        level = FeatureLevel(options.feature_level)
    except ValueError as e:
        raise BadInputError(
            f"invalid KernelOptions: {e}", op_type=desc.operator_type.dml_name, node=options.node
        ) from e
    context = IndexContext(
        op=desc.operator_type,
        node=options.node,
        data_type=data_type,
        feature_level=level,
        mode=mode,
        target=target,
    )
    if cacheable:
        checked.contexts[key] = context
    return context
