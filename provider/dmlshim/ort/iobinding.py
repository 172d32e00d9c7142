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
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ..errors import BadInputError, NotSupportedError
from ..execute.cpu_step import NUMPY_TENSOR_TYPES
from .exceptions import raises_onnxruntime_errors
from .real import pybind_state
from .session_args import tensor_name

if TYPE_CHECKING:
    from .session import InferenceSession

logger = logging.getLogger(__name__)

_CPU_ONLY = (
    "dmlshim runs on the CPU (DirectML is emulated with numpy kernels); bind CPU memory: "
    "device_type='cpu', bind_cpu_input, or a CPU OrtValue"
)


_DEVICES_ALLOCATED_ON_CPU = frozenset({"cpu", "dml", "cuda", "gpu", "npu", "cann"})
"""The device names onnxruntime's CPU package takes in ``bind_output`` without a pointer (the output is
then allocated in CPU memory); it refuses other names ("Unsupported device type")."""


def _check_cpu(device_type: str, what: str) -> None:
    if str(device_type).lower() != "cpu":
        raise NotSupportedError(f"{what} on device {device_type!r}: {_CPU_ONLY}", value=device_type)


_STORED_BYTES = {
    getattr(TensorProto, name): size
    for name, size in (
        ("BFLOAT16", 2),
        ("FLOAT8E4M3FN", 1),
        ("FLOAT8E4M3FNUZ", 1),
        ("FLOAT8E5M2", 1),
        ("FLOAT8E5M2FNUZ", 1),
    )
    if hasattr(TensorProto, name)
}
"""Bytes per element of the ONNX types numpy has no type of its own for. onnx before 1.18 maps them to
float32; a view of bound memory must have their own size (their bits, as unsigned integers)."""


def numpy_element_type(element_type: Any) -> np.dtype:
    """A numpy dtype from a numpy type or an ONNX element type number, as onnxruntime accepts both."""
    try:
        if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(element_type)))
            size = _STORED_BYTES.get(int(element_type))
            return dtype if size is None or dtype.itemsize == size else np.dtype(f"u{size}")
        return np.dtype(element_type)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"unknown element type {element_type!r}", value=element_type) from exc


def array_at(pointer: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of CPU memory at ``pointer`` holding a tensor of ``element_type`` and ``shape``."""
    dtype = numpy_element_type(element_type)
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise BadInputError(f"a bound buffer's shape must be non-negative, not {list(dims)}", value=dims)
    count = int(np.prod(dims, dtype=np.int64))
    if count == 0:
        return np.zeros(dims, dtype)
    if not pointer:
        raise BadInputError("buffer_ptr is null", value=pointer)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(pointer))
    return np.frombuffer(memoryview(raw), dtype=dtype, count=count).reshape(dims)


_NPY_USERDEF = 256
"""numpy's first number for a type an extension registers (ml_dtypes' bfloat16, float8, int4)."""


def as_array(value: Any) -> Any:
    """An ``onnxruntime.OrtValue`` as the numpy array it holds (a view for CPU tensors), an ndarray subclass
    as a plain ndarray view; other values, and OrtValues of element types numpy cannot hold, unchanged."""
    if isinstance(value, ort.OrtValue):
        if not value.is_tensor():
            raise NotSupportedError(
                "only tensor OrtValues can be fed to a dmlshim session, not sparse tensors or sequences",
                value=value.data_type(),
            )
        _check_cpu(value.device_name(), "an OrtValue")
        if value.data_type() not in NUMPY_TENSOR_TYPES:
            return (
                value  # bfloat16, float8, 4-bit: numpy cannot hold it; onnxruntime's sessions take it as is
            )
        return value.numpy()
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        # a subclass (np.matrix, a masked array, np.memmap): onnxruntime reads its buffer as a plain array
        return np.asarray(value)
    return value


def refuse_unconvertible_array(name: str, value: Any) -> None:
    """Raise NotSupportedError (a ``RuntimeError``, as onnxruntime's) for a numpy array of a type numpy
    only knows through an extension such as ml_dtypes (bfloat16, float8): onnxruntime's ``run`` takes no
    such array ("Numpy_type 256 can't be converted to MLDataType"), only an OrtValue of that type."""
    if not isinstance(value, np.ndarray) or value.dtype.num < _NPY_USERDEF:
        return
    try:
        elem = helper.tensor_dtype_to_string(helper.np_dtype_to_tensor_dtype(value.dtype))
    except (KeyError, TypeError, ValueError):
        elem = "its ONNX element type"
    view = "uint8" if value.dtype.itemsize == 1 else "uint16"
    raise NotSupportedError(
        f"feed {name!r} is a numpy {value.dtype} array, a type onnxruntime's run takes no numpy array of "
        '(onnxruntime raises "Numpy_type ... can\'t be converted to MLDataType" here); feed '
        "onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type"
        f"(array.view(numpy.{view}), onnx.{elem}) instead",
        tensor=name,
        value=str(value.dtype),
    )


def refuse_unholdable_outputs(
    names: Sequence[str], outputs: Sequence[Any], instead: str = "ask for it with run_with_ort_values"
) -> None:
    """Raise NotSupportedError (a ``RuntimeError``, as onnxruntime's) for an output ``run()`` cannot return:
    a tensor numpy cannot hold (bfloat16, float8), which onnxruntime's ``run`` refuses too."""
    for name, value in zip(names, outputs, strict=True):
        if isinstance(value, ort.OrtValue) and value.is_tensor():
            raise NotSupportedError(
                f"output {name!r} is a {value.data_type()}, which numpy cannot hold, so it cannot be "
                'returned as an array (onnxruntime raises here too: "No corresponding Numpy type"); '
                f"{instead}",
                tensor=name,
                value=value.data_type(),
            )


def to_ortvalue(value: Any) -> Any:
    """A run's output as an ``onnxruntime.OrtValue`` (tensors only; one numpy cannot hold, e.g. bfloat16,
    is already onnxruntime's OrtValue and is returned as it is)."""
    if isinstance(value, ort.OrtValue) and value.is_tensor():
        return value
    if not isinstance(value, np.ndarray):
        raise NotSupportedError(
            f"run_with_ort_values returns tensors only; this output is a {type(value).__name__} "
            "(use run() for sequence and map outputs)"
        )
    if value.dtype.kind in "OUS":
        return string_ortvalue(value)
    # An OrtValue made by ortvalue_from_numpy only borrows the array's memory, and nothing keeps the array
    # alive once this returns: the OrtValue must own a copy.
    owned = ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), value.dtype)
    owned.update_inplace(np.ascontiguousarray(value))
    return owned


def string_ortvalue(value: np.ndarray) -> Any:
    """A string tensor as an ``onnxruntime.OrtValue``, which only an onnxruntime session can make (its
    ``OrtValue`` factories refuse strings): a model holding the strings as a constant, run once."""
    from .real import OrtInferenceSession

    as_text = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v), otypes=[object])
    strings = as_text(value) if value.size else np.asarray(value, dtype=object)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["strings"], ["out"])],
        "dmlshim_string_ortvalue",
        [],
        [helper.make_tensor_value_info("out", TensorProto.STRING, list(value.shape))],
        [numpy_helper.from_array(np.asarray(strings, dtype=object), "strings")],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])
    session = OrtInferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run_with_ort_values(None, {})[0]


def ortvalues_from_vector(names: Sequence[str], feeds: Any) -> dict[str, Any]:
    """The values of an onnxruntime ``OrtValueVector``, by name (``run_with_ortvaluevector``'s feeds)."""
    if len(names) != len(feeds):
        raise BadInputError(
            f"{len(names)} feed names for {len(feeds)} feeds; give one name per OrtValue", value=len(feeds)
        )
    try:
        return {name: ort.OrtValue(feeds[i]) for i, name in enumerate(names)}
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"feeds must be an onnxruntime OrtValueVector: {exc}") from exc


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
        arr = np.ascontiguousarray(to_ortvalue(out).numpy())
        if len(fetches) > i:
            ort.OrtValue(fetches[i]).update_inplace(arr)
        else:
            owned = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), arr.dtype, "cpu")
            owned.update_inplace(arr)
            fetches.push_back(owned._get_c_value())


_binds = raises_onnxruntime_errors(RuntimeError, pybind_state.Fail)
"""onnxruntime raises a plain RuntimeError when a binding names no input or output of the model."""


@dataclass
class _OutputBinding:
    """Where one output goes: allocated by the run (target None), an OrtValue, or CPU memory."""

    name: str
    ortvalue: Any = None
    buffer: np.ndarray | None = None


class IOBinding:
    """Inputs and outputs bound ahead of :meth:`InferenceSession.run_with_iobinding`.

    Create with ``session.io_binding()``. Same methods as ``onnxruntime.IOBinding``.
    """

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, _OutputBinding] = {}
        self._results: list[Any] | None = None

    @property
    def session(self) -> InferenceSession:
        """The session that created this binding."""
        return self._session

    @property
    def _iobinding(self) -> IOBinding:
        """What ``session._sess.run_with_iobinding`` takes, as onnxruntime's ``IOBinding._iobinding``."""
        return self

    def _check_name(self, name: Any, outputs: bool) -> str:
        """The name (bytes read as UTF-8, as onnxruntime takes them); refuse, at bind time as onnxruntime
        does, a name that is not an input (output) of the model."""
        name = tensor_name(name, "output" if outputs else "input")
        if outputs:
            known = [a.name for a in self._session.get_outputs()]
        else:
            session = self._session
            known = [a.name for a in (*session.get_inputs(), *session.get_overridable_initializers())]
        if name not in known:
            kind = "output" if outputs else "input"
            raise BadInputError(
                f"cannot bind {name!r}: it is not an {kind} of the model ({kind}s: {', '.join(known)})",
                tensor=str(name),
                value=name,
                rule=f"a bound {kind} must be an {kind} of the model",
            )
        return name

    # --- inputs ------------------------------------------------------------------------------------

    @_binds
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind an input to a numpy array (kept by reference, as in onnxruntime: not copied)."""
        name = self._check_name(name, outputs=False)
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
            NotSupportedError: ``device_type`` is not ``"cpu"``.
        """
        name = self._check_name(name, outputs=False)
        _check_cpu(device_type, f"input {name!r} bound")
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
            BadInputError: ``buffer_ptr`` without ``element_type`` and ``shape``.
        """
        name = self._check_name(name, outputs=True)
        if buffer_ptr is None and str(device_type) in _DEVICES_ALLOCATED_ON_CPU:
            # onnxruntime's CPU package takes an output bound to another device (a DirectML program's
            # bind_output(name, "dml")) and allocates it in CPU memory: so does dmlshim
            self._outputs[name] = _OutputBinding(name)
            return
        _check_cpu(device_type, f"output {name!r} bound")
        if buffer_ptr is None:
            self._outputs[name] = _OutputBinding(name)
            return
        if element_type is None or shape is None:
            raise BadInputError(
                "element_type and shape are required with a pre-allocated buffer_ptr", tensor=name
            )
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
        self._results = None

    def get_outputs(self) -> list[Any]:
        """The outputs of the last run as ``onnxruntime.OrtValue``s, in the order they were bound."""
        results = self._results or []
        out = []
        for binding, value in zip(self._outputs.values(), results, strict=False):
            if binding.ortvalue is not None:
                out.append(binding.ortvalue)
            elif isinstance(value, ort.OrtValue):  # a type numpy cannot hold (bfloat16, float8)
                out.append(value)
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
        results = self._results or []
        refuse_unholdable_outputs(
            list(self._outputs)[: len(results)], results, "get_outputs() gives it as an OrtValue"
        )
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
        kept: list[Any] = []
        for binding, value in zip(self._outputs.values(), results, strict=True):
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
                kept.append(arr)
        self._results = kept


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
