"""onnxruntime-extensions: the library to register on a session, and the Python kernels registered in it."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...errors import EngineUnavailableError
from ...extras import install_command
from ...fork_locks import ChildLock
from .ext_import import import_extensions
from .kernel import kernel
from .types import CUSTOM_DOMAIN, DECLARED_ATTRIBUTES, all_signatures, outputs_cross_as_arrays

logger = logging.getLogger(__name__)

__all__ = [
    "array_outputs",
    "extensions",
    "library_path",
    "register_custom_ops",
    "session_options_with_custom_ops",
]

_COPIED_SESSION_OPTIONS = (
    "intra_op_num_threads",
    "inter_op_num_threads",
    "execution_mode",
    "execution_order",
    "graph_optimization_level",
    "log_severity_level",
    "log_verbosity_level",
    "logid",
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "use_deterministic_compute",
    "enable_profiling",
    "profile_file_prefix",
)


def extensions() -> Any:
    """The onnxruntime_extensions module.

    Raises:
        EngineUnavailableError: it is not installed.
    """
    try:
        onnxruntime_extensions = import_extensions()
    except ImportError as exc:
        raise EngineUnavailableError(
            "the custom-op engine needs onnxruntime-extensions: " + install_command("customop"),
            value="onnxruntime-extensions",
        ) from exc
    return onnxruntime_extensions


def library_path() -> str:
    """The onnxruntime-extensions custom-op library to register on a SessionOptions.

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
    """
    return str(extensions().get_library_path())


_ALL_REGISTERED = False
_REGISTER_LOCK = ChildLock()


_OUR_OPS: dict[int, Any] = {}
"""The onnxruntime-extensions op definitions registered here, by the id the C++ side calls them with."""
_ARRAY_OUTPUTS = False
_INT_ATTRIBUTES = frozenset(name for name, kind in DECLARED_ATTRIBUTES if kind == "int")


def array_outputs() -> bool:
    """Whether this process's custom-op outputs cross the bridge as numpy arrays (one copy) rather than
    as the Python lists onnxruntime-extensions' own dispatcher makes (about 100 ns per element)."""
    return _ARRAY_OUTPUTS


def _dispatch_with_arrays(ext: Any) -> Any:
    """The function onnxruntime-extensions' C++ kernel calls for every Python op, or None when this
    version does not expose what it needs.

    onnxruntime-extensions' own dispatcher returns each output as ``(shape, values.flatten().tolist())``;
    its C++ side converts that sequence to a numpy array and copies the array's buffer into the output
    tensor. Handing it the C-contiguous array itself skips building and converting one Python object
    per element (the buffer is copied once, as before). Ops registered by anyone else keep the original
    dispatcher.
    """
    ocos = getattr(ext, "_ocos", None)
    original = getattr(ocos, "_on_pyop_invocation", None)
    install = getattr(ext.PyCustomOpDef, "install_hooker", None)
    if original is None or install is None:
        return None

    def dispatch(k_id: int, feed: Any, attributes: Any) -> Any:
        op = _OUR_OPS.get(k_id)
        if op is None:
            return original(k_id, feed, attributes)
        # Every attribute arrives as a string; Opdef.cast_attributes would read the op's declared kinds
        # from the C++ object once per attribute (a dict conversion each time, ~100 us a call).
        try:
            attrs = {k: int(v) if k in _INT_ATTRIBUTES else v for k, v in attributes.items()}
        except (TypeError, ValueError):  # an exception leaving here aborts the process: kernel reports it
            attrs = dict(attributes)
        out = kernel(*feed, **attrs)
        # The C++ side copies ``itemsize * size`` bytes from the array's buffer: it must be contiguous.
        return (k_id, out.shape, np.ascontiguousarray(out).reshape(-1))

    return dispatch


def register_custom_ops() -> None:
    """Register the Python kernel of every custom op a lowered model can use (once per process).

    All of them are registered at once, before any session uses the onnxruntime-extensions library:
    registering more op types after such a session exists makes onnxruntime-extensions crash when that
    session is destroyed.

    Raises:
        EngineUnavailableError: onnxruntime-extensions is not installed.
    """
    global _ALL_REGISTERED, _ARRAY_OUTPUTS
    if _ALL_REGISTERED:
        return
    ext = extensions()
    dt = ext.PyCustomOpDef
    bridge: dict[int, Any] = {
        onnx.TensorProto.FLOAT: dt.dt_float,
        onnx.TensorProto.DOUBLE: dt.dt_double,
        onnx.TensorProto.INT8: dt.dt_int8,
        onnx.TensorProto.INT16: dt.dt_int16,
        onnx.TensorProto.INT32: dt.dt_int32,
        onnx.TensorProto.INT64: dt.dt_int64,
        onnx.TensorProto.UINT8: dt.dt_uint8,
        onnx.TensorProto.UINT16: dt.dt_uint16,
        onnx.TensorProto.UINT32: dt.dt_uint32,
        onnx.TensorProto.BOOL: dt.dt_bool,
    }
    kinds = {"string": dt.dt_string, "int": dt.dt_int64}
    attrs = {name: kinds[kind] for name, kind in DECLARED_ATTRIBUTES}
    with _REGISTER_LOCK:
        if _ALL_REGISTERED:
            return
        for sig in all_signatures():
            op = ext.onnx_op(
                op_type=sig.op_type,
                domain=CUSTOM_DOMAIN,
                inputs=[bridge[t] for t in sig.input_types],
                outputs=[bridge[sig.output_type]],
                attrs=attrs,
            )(kernel)
            _OUR_OPS[int(getattr(getattr(op, "_nativedef", None), "obj_id", id(op)))] = op
        dispatch = _dispatch_with_arrays(ext) if outputs_cross_as_arrays() else None
        if dispatch is not None:
            ext.PyCustomOpDef.install_hooker(dispatch)
            _ARRAY_OUTPUTS = True
        else:
            logger.info("onnxruntime-extensions %s: custom-op outputs cross as Python lists", ext.__version__)
        _ALL_REGISTERED = True
        logger.debug("registered %d custom ops in %s", len(all_signatures()), CUSTOM_DOMAIN)


def session_options_with_custom_ops(sess_options: Any = None) -> ort.SessionOptions:
    """A new SessionOptions with the onnxruntime-extensions library registered.

    The caller's options are copied (threads, optimization level, logging, ...), never modified.
    """
    so = ort.SessionOptions()
    if sess_options is not None:
        for name in _COPIED_SESSION_OPTIONS:
            try:
                setattr(so, name, getattr(sess_options, name))
            except (AttributeError, TypeError, RuntimeError):
                logger.debug("session option %s not copied", name)
    register_custom_ops()
    so.register_custom_ops_library(library_path())
    return so
