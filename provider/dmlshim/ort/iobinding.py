"""``IOBinding`` for dmlshim sessions: onnxruntime's input/output binding API, on the CPU.

dmlshim runs on the CPU, so every binding is CPU memory: numpy arrays, CPU ``OrtValue``s, or raw CPU
pointers. An output bound to an ``OrtValue`` or to a pointer is written there after the run; an output
bound by name only is allocated by the run, as in onnxruntime.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import BadInputError, NotSupportedError
from ..execute.plan.cpu_step import NUMPY_TENSOR_TYPES
from ..runtime.exceptions import raises_plain_runtime_errors, with_binding_class, with_onnxruntime_class
from .ortvalues import (
    array_at,
    as_array,
    check_cpu,
    numpy_outputs,
    string_ortvalue,
    to_ortvalue,
)
from .session_args import tensor_name
from .session_surface import SessionSurface
from .unallocated import unallocated_error, unallocated_ortvalue

logger = logging.getLogger(__name__)

_DEVICES_ALLOCATED_ON_CPU = frozenset({"cpu", "dml", "cuda", "gpu", "npu", "cann", "webgpu"})
"""The device names onnxruntime's CPU package takes in ``bind_output`` without a pointer (the output is
then allocated in CPU memory); it refuses other names ("Unsupported device type")."""


def _check_device_name(device_type: Any) -> None:
    """onnxruntime's Python layer refuses a device name it does not know (case matters: ``"CPU"`` too) with a
    plain ``Exception`` ("Unsupported device type: ...") before any binding."""
    if device_type not in _DEVICES_ALLOCATED_ON_CPU:
        error = NotSupportedError(
            f"Unsupported device type: {device_type} (onnxruntime knows "
            f"{', '.join(sorted(_DEVICES_ALLOCATED_ON_CPU))})",
            value=str(device_type),
            rule="a device name onnxruntime knows",
        )
        raise with_binding_class(error, Exception)


def fill_fetches(fetches: Any, outputs: Sequence[Any]) -> None:
    """Put a run's outputs into an ``OrtValueVector``: appended when it is empty, else written into the
    values it holds (one per output). Appended values own their memory (onnxruntime-allocated)."""
    if len(fetches) not in (0, len(outputs)):
        raise BadInputError(
            f"fetches holds {len(fetches)} values for {len(outputs)} fetch names; pass an empty "
            "OrtValueVector or one value per name",
            value=len(fetches),
        )
    for i, out in enumerate(outputs):
        if isinstance(out, ort.OrtValue) and out.data_type() not in NUMPY_TENSOR_TYPES:  # bfloat16, float8
            if len(fetches) > i:
                _store_ortvalue(_OutputBinding(f"fetch {i}", ortvalue=ort.OrtValue(fetches[i])), out)
            else:
                fetches.push_back(out._get_c_value())
            continue
        arr = np.asarray(to_ortvalue(out).numpy(), order="C")  # a 0-d output stays 0-d
        if len(fetches) > i:
            ort.OrtValue(fetches[i]).update_inplace(arr)
        else:
            owned = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), arr.dtype, "cpu")
            owned.update_inplace(arr)
            fetches.push_back(owned._get_c_value())


_binds = raises_plain_runtime_errors
"""onnxruntime's IOBinding raises a plain RuntimeError (no status class) for every failure."""


@dataclass
class _OutputBinding:
    """Where one output goes: allocated by the run (target None), an OrtValue, or CPU memory."""

    name: str
    ortvalue: Any = None
    buffer: np.ndarray | None = None
    allocated: tuple[int, ...] | None = None
    """The shape of the output a run allocated for a binding by name: onnxruntime keeps that output
    bound, as pre-allocated memory, until the output is bound again."""
    result: Any = None
    """What the last run wrote for this binding (None before a run, and once the output is bound again)."""
    owner: Any = None
    """For an output bound by name: the ``OrtValue`` owning the memory ``result`` views, as onnxruntime's
    binding holds the output it allocated (what ``get_outputs()`` returns: an array taken from it keeps
    that memory alive after the binding and the session are gone, as onnxruntime's does)."""

    def bound_value(self) -> Any:
        """What onnxruntime's binding holds for this output: the last run's value, else the bound
        ``OrtValue``, else an ``OrtValue`` over the bound memory, else (bound by name, never run) None."""
        if self.result is not None:
            return self.result
        if self.ortvalue is not None:
            return self.ortvalue
        if self.buffer is not None:
            return self.buffer
        return None


class IOBinding:
    """Inputs and outputs bound ahead of :meth:`InferenceSession.run_with_iobinding`.

    Create with ``session.io_binding()``. Same methods as ``onnxruntime.IOBinding``.
    """

    def __init__(self, session: SessionSurface) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, _OutputBinding] = {}

    @property
    def session(self) -> SessionSurface:
        """The session that created this binding."""
        return self._session

    @property
    def _iobinding(self) -> IOBinding:
        """What ``session._sess.run_with_iobinding`` takes, as onnxruntime's ``IOBinding._iobinding``."""
        return self

    def _check_name(self, name: Any, outputs: bool) -> str:
        """The name (bytes read as UTF-8, as onnxruntime takes them); refuse, at bind time as onnxruntime
        does, a name that is not an input of the model. An output's name is checked by the run, as
        onnxruntime checks it ("Invalid output name"), not at bind time."""
        try:
            name = tensor_name(name, "output" if outputs else "input")
        except BadInputError as exc:  # pybind11's "incompatible function arguments": a TypeError there too
            raise with_binding_class(exc, TypeError) from None
        if outputs:
            return name
        session = self._session
        known = [a.name for a in (*session.get_inputs(), *session.get_overridable_initializers())]
        if name not in known:
            kind = "output" if outputs else "input"
            raise BadInputError(
                f"Failed to find NodeArg with name: {name} in the def list (dmlshim: cannot bind "
                f"{name!r}: it is not an {kind} of the model ({kind}s: {', '.join(known)}))",
                tensor=str(name),
                value=name,
                rule=f"a bound {kind} must be an {kind} of the model",
            )
        return name

    def _input_type(self, name: str) -> str:
        """The type of the model input (or overridable initializer) ``name``, as onnxruntime writes it."""
        session = self._session
        args = (*session.get_inputs(), *session.get_overridable_initializers())
        return next((a.type for a in args if a.name == name), "")

    # --- inputs ------------------------------------------------------------------------------------

    @_binds
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind an input to a numpy array (kept by reference, as in onnxruntime: not copied).

        Raises:
            BadInputError: anything but a numpy array (a list, a scalar, an ``OrtValue``), with
                onnxruntime's ``RuntimeError`` ("Unable to create OrtValue from the given python object").
        """
        name = self._check_name(name, outputs=False)
        if not isinstance(arr_on_cpu, np.ndarray):
            hint = "bind_ortvalue_input" if isinstance(arr_on_cpu, ort.OrtValue) else "np.asarray(value)"
            error = BadInputError(
                "Unable to create OrtValue from the given python object (dmlshim: cannot bind input "
                f"{name!r} to a {type(arr_on_cpu).__name__}: bind_cpu_input takes a numpy array; use {hint})",
                tensor=name,
                value=type(arr_on_cpu).__name__,
                rule="bind_cpu_input takes a numpy array",
            )
            raise with_onnxruntime_class(error, RuntimeError)
        if self._input_type(name) == "tensor(string)":  # onnxruntime's binding refuses any array there
            error = BadInputError(
                "Only binding non-string Tensors is currently supported (dmlshim: input "
                f"{name!r} is a tensor(string), which onnxruntime's bind_cpu_input does not bind: feed it "
                "with run() instead)",
                tensor=name,
                value=str(arr_on_cpu.dtype),
                rule="bind_cpu_input binds inputs of numeric types only",
            )
            raise with_onnxruntime_class(error, RuntimeError)
        self._inputs[name] = arr_on_cpu

    @_binds
    def bind_input(
        self,
        name: str,
        device_type: str,
        device_id: int,
        element_type: Any,
        shape: Sequence[int],
        buffer_ptr: int,
    ) -> None:
        """Bind an input to CPU memory at ``buffer_ptr`` holding ``shape`` elements of ``element_type``.

        Raises:
            NotSupportedError: ``device_type`` is not ``"cpu"`` (a ``RuntimeError``), or is no name
                onnxruntime knows (a plain ``Exception``, as onnxruntime's "Unsupported device type").
        """
        name = self._check_name(name, outputs=False)
        _check_device_name(device_type)
        check_cpu(device_type, f"input {name!r} bound")
        self._inputs[name] = array_at(buffer_ptr, element_type, shape)

    @_binds
    def bind_ortvalue_input(self, name: str, ortvalue: Any) -> None:
        """Bind an input to an ``onnxruntime.OrtValue`` (a CPU tensor)."""
        name = self._check_name(name, outputs=False)
        as_array(ortvalue)
        self._inputs[name] = ortvalue

    def synchronize_inputs(self) -> None:
        """Nothing to do: every binding is CPU memory."""

    def clear_binding_inputs(self) -> None:
        """Forget every bound input."""
        self._inputs.clear()

    # --- outputs -----------------------------------------------------------------------------------

    @_binds
    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output: allocated by the run, or written into CPU memory at ``buffer_ptr``.

        Raises:
            NotSupportedError: ``buffer_ptr`` on a device other than ``"cpu"`` (without one, an output
                bound to ``"dml"``, ``"cuda"``, ... is allocated in CPU memory, as onnxruntime's CPU package
                does).
            BadInputError: ``buffer_ptr`` without ``element_type`` and ``shape`` (a ``ValueError``, as
                onnxruntime's); a device name onnxruntime does not know is a plain ``Exception`` as there.
        """
        name = self._check_name(name, outputs=True)
        if buffer_ptr is not None and (element_type is None or shape is None):
            error = BadInputError(
                "element_type and shape are required with a pre-allocated buffer_ptr", tensor=name
            )
            raise with_binding_class(error, ValueError)  # onnxruntime's Python layer: a ValueError
        _check_device_name(device_type)
        if buffer_ptr is None:
            # onnxruntime's CPU package takes an output bound to another device (a DirectML program's
            # bind_output(name, "dml")) and allocates it in CPU memory: so does dmlshim
            self._outputs[name] = _OutputBinding(name)
            return
        check_cpu(device_type, f"output {name!r} bound")
        self._outputs[name] = _OutputBinding(name, buffer=array_at(buffer_ptr, element_type, shape))

    @_binds
    def bind_ortvalue_output(self, name: str, ortvalue: Any) -> None:
        """Bind an output to an ``onnxruntime.OrtValue`` (a CPU tensor of the output's type and shape)."""
        name = self._check_name(name, outputs=True)
        as_array(ortvalue)
        self._outputs[name] = _OutputBinding(name, ortvalue=ortvalue)

    def synchronize_outputs(self) -> None:
        """Nothing to do: every binding is CPU memory."""

    def clear_binding_outputs(self) -> None:
        """Forget every bound output (and the results of the last run)."""
        self._outputs.clear()

    def get_outputs(self) -> list[Any]:
        """One ``onnxruntime.OrtValue`` per bound output, in the order they were bound, as onnxruntime's
        binding holds them: the last run's output; before a run (or once bound again) the bound
        ``OrtValue``, an ``OrtValue`` over the bound memory (no copy), or, for an output bound by name,
        an ``OrtValue`` holding nothing yet (``has_value()`` False)."""
        out = []
        for binding in self._outputs.values():
            value = binding.bound_value()
            if value is None:
                out.append(unallocated_ortvalue(binding.name))
            elif binding.ortvalue is not None or isinstance(value, ort.OrtValue):
                out.append(binding.ortvalue if binding.ortvalue is not None else value)
            elif binding.owner is not None:
                out.append(binding.owner)
            elif value.dtype.kind in "OUS":  # strings: an OrtValue only onnxruntime's session makes
                out.append(string_ortvalue(value))
            else:
                out.append(ort.OrtValue.ortvalue_from_numpy(value))
        return out

    def get_outputs_as_ortvaluevector(self) -> Any:
        """Not available: onnxruntime's ``OrtValueVector`` is built only by its own sessions.

        Raises:
            NotSupportedError: always; use :meth:`get_outputs` or :meth:`copy_outputs_to_cpu`.
        """
        raise NotSupportedError(
            "get_outputs_as_ortvaluevector is not available in dmlshim (an OrtValueVector can only come "
            "from onnxruntime's own session); use get_outputs() for OrtValues or copy_outputs_to_cpu() for "
            "numpy arrays"
        )

    @_binds
    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """The outputs of the last run as numpy arrays (copies), in the order they were bound.

        Raises:
            NotSupportedError: an output numpy cannot hold (bfloat16, float8): a ``RuntimeError``, as
                onnxruntime raises here; :meth:`get_outputs` gives it as an ``OrtValue``.
        """
        names = list(self._outputs)
        made = [binding.bound_value() for binding in self._outputs.values()]
        for name, value in zip(names, made, strict=True):
            if value is None:
                raise unallocated_error(name)
        results = numpy_outputs(names, made, "get_outputs() gives it as an OrtValue")
        return [np.array(v, copy=True) for v in results]

    # --- used by InferenceSession.run_with_iobinding ----------------------------------------------

    def bound_feeds(self) -> dict[str, Any]:
        """The bound inputs, by name."""
        return dict(self._inputs)

    def bound_output_names(self) -> list[str]:
        """The bound outputs, in binding order."""
        return list(self._outputs)

    def store_results(self, results: Sequence[Any]) -> None:
        """Keep a run's outputs and write those bound to an OrtValue or a buffer into it.

        Raises:
            BadInputError: an output's shape or type differs from the OrtValue or buffer bound to it.
        """
        for binding, value in zip(self._outputs.values(), results, strict=True):
            _check_allocated(binding, value)
        kept: list[Any] = []
        for binding, value in zip(self._outputs.values(), results, strict=True):
            if binding.ortvalue is None and binding.buffer is None:
                shape = value.shape() if isinstance(value, ort.OrtValue) else np.shape(value)
                binding.allocated = tuple(int(d) for d in shape)
            if isinstance(value, ort.OrtValue):  # bfloat16, float8: onnxruntime's OrtValue, kept as it is
                kept.append(_store_ortvalue(binding, value))
                continue
            arr = np.asarray(value)
            if binding.ortvalue is not None:
                target = binding.ortvalue.numpy()
                _check_fits(binding.name, arr, target)
                binding.ortvalue.update_inplace(np.ascontiguousarray(arr))
                kept.append(binding.ortvalue.numpy())
            elif binding.buffer is not None:
                _check_fits(binding.name, arr, binding.buffer)
                binding.buffer[...] = arr
                kept.append(binding.buffer)
            else:
                if binding.result is None or binding.owner is None:
                    binding.owner = _owning_ortvalue(arr)
                held = _into_allocated(binding.result, arr, binding.owner)
                if held is arr:  # not written into the owner's memory (strings): nothing owns it
                    binding.owner = None
                kept.append(held)
        for binding, value in zip(self._outputs.values(), kept, strict=True):
            binding.result = value


def _owning_ortvalue(arr: np.ndarray) -> Any:
    """An ``OrtValue`` that owns a copy of ``arr`` (None for strings, which only a session makes): an
    ``OrtValue`` made by ``ortvalue_from_numpy`` borrows the array's memory, and an array taken from it
    with ``numpy()`` would outlive that memory."""
    if arr.dtype.kind in "OUS":
        return None
    owned = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), arr.dtype)
    owned.update_inplace(np.ascontiguousarray(arr))
    return owned


def _into_allocated(held: Any, arr: np.ndarray, owner: Any) -> np.ndarray:
    """The memory an output bound by name holds after this run: onnxruntime writes a later run's output
    into the output its first run allocated, so an ``OrtValue`` from ``get_outputs()`` (or its
    ``data_ptr()``) taken after one run shows the next run's values. The first run's output is held in
    ``owner``'s memory (a view of it; the array itself for strings), a later one copied into it."""
    if held is None:
        return owner.numpy() if owner is not None else arr
    same = isinstance(held, np.ndarray) and held.shape == arr.shape and held.dtype == arr.dtype
    if not same or held.dtype.kind in "OUS" or not held.flags.writeable or not held.flags.c_contiguous:
        return arr
    if not np.shares_memory(held, arr):
        held[...] = arr
    return held


def _check_allocated(binding: _OutputBinding, value: Any) -> None:
    """As onnxruntime: an output bound by name holds the output its first run allocated, and a later run
    whose output has another shape fails (the binding is pre-allocated memory from then on)."""
    if binding.allocated is None:
        return
    shape = tuple(int(d) for d in (value.shape() if isinstance(value, ort.OrtValue) else np.shape(value)))
    if shape != binding.allocated:
        raise BadInputError(
            f"output {binding.name!r} of this run has shape {list(shape)}, but the binding holds the "
            f"{list(binding.allocated)} output an earlier run allocated for it (onnxruntime keeps an output "
            "bound with bind_output(name) after a run, as pre-allocated memory); bind the output again "
            "(bind_output, or clear_binding_outputs) before a run whose output has another shape",
            tensor=binding.name,
            value=list(shape),
            rule="an output bound to pre-allocated memory must have that memory's shape and type",
        )


def _bound_mismatch(name: str, value: Any, where: str, held: str) -> BadInputError:
    """The error for an output whose shape or type is not that of the memory bound to it."""
    return BadInputError(
        f"output {name!r} is {value.data_type()}{list(value.shape())} but {where} holds {held}",
        tensor=name,
        value=list(value.shape()),
        rule="an output bound to pre-allocated memory must have that memory's shape and type",
    )


def _store_ortvalue(binding: _OutputBinding, value: Any) -> Any:
    """An output numpy cannot hold, for its binding: the run's OrtValue, or its bytes copied into the
    OrtValue bound to it (same type and shape)."""
    if binding.buffer is not None:  # a CPU pointer: the bytes go there, as onnxruntime writes them
        if value.data_type() not in _ITEM_BYTES:
            raise NotSupportedError(
                f"output {binding.name!r} is a {value.data_type()}, which dmlshim cannot copy into a bound "
                "pointer; bind it with bind_output(name) and read it with get_outputs()",
                tensor=binding.name,
                value=value.data_type(),
            )
        size = int(np.prod(value.shape(), dtype=np.int64)) * _ITEM_BYTES[value.data_type()]
        if list(binding.buffer.shape) != list(value.shape()) or binding.buffer.nbytes != size:
            held = f"{binding.buffer.dtype}{list(binding.buffer.shape)}"
            raise _bound_mismatch(binding.name, value, "the memory bound to it", held)
        if size:
            ctypes.memmove(binding.buffer.ctypes.data, value.data_ptr(), size)
        return value
    target = binding.ortvalue
    if target is None:
        return value
    if target.data_type() != value.data_type() or list(target.shape()) != list(value.shape()):
        held = f"{target.data_type()}{list(target.shape())}"
        raise _bound_mismatch(binding.name, value, "the OrtValue bound to it", held)
    size = int(np.prod(value.shape(), dtype=np.int64)) * _ITEM_BYTES[value.data_type()]
    ctypes.memmove(target.data_ptr(), value.data_ptr(), size)
    return target


_ITEM_BYTES = {
    "tensor(bfloat16)": 2,
    "tensor(float8e4m3fn)": 1,
    "tensor(float8e4m3fnuz)": 1,
    "tensor(float8e5m2)": 1,
    "tensor(float8e5m2fnuz)": 1,
}
"""Bytes per element of the tensor types numpy cannot hold whose OrtValues an IOBinding copies."""


def _check_fits(name: str, value: np.ndarray, target: np.ndarray) -> None:
    if value.shape != target.shape or value.dtype != target.dtype:
        raise BadInputError(
            f"output {name!r} is {value.dtype}{list(value.shape)} but the memory bound to it holds "
            f"{target.dtype}{list(target.shape)}",
            tensor=name,
            value=list(value.shape),
            rule="an output bound to pre-allocated memory must have that memory's shape and type",
        )
