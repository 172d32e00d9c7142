"""onnxruntime CPU runs for capturing values, including values of element types numpy cannot hold.

onnxruntime's ``run`` refuses to return a bfloat16, float8 or 4-bit tensor ("No corresponding Numpy type").
A capture still needs those values (a Cast to bfloat16 before a Gather is common in mixed-precision
models), so such an output is fetched through a Cast onnxruntime adds to a widening type that holds every
value exactly (float32 for the small float types, int8/uint8 for int4/uint4) and turned back into the
ml_dtypes array of the original element type. The values are onnxruntime's, bit for bit.

Feeds of those types (a loop-carried bfloat16 value fed to a body) go in as OrtValues of the original
element type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from ..errors import NotSupportedError
from ..execute.weights.shared import SharedWeights
from ..model.ort_view import type_from_ort
from ..runtime.real import OrtInferenceSession

__all__ = ["CaptureRunner", "capture_session_options"]

# Element types onnxruntime's run cannot return as numpy, and the type each is widened to without changing
# a value. Looked up by name: older onnx releases lack some (FLOAT4E2M1 arrived in onnx 1.18).
_WIDENING: dict[int, int] = {
    getattr(TensorProto, narrow): getattr(TensorProto, wide)
    for narrow, wide in (
        ("BFLOAT16", "FLOAT"),
        ("FLOAT8E4M3FN", "FLOAT"),
        ("FLOAT8E4M3FNUZ", "FLOAT"),
        ("FLOAT8E5M2", "FLOAT"),
        ("FLOAT8E5M2FNUZ", "FLOAT"),
        ("FLOAT4E2M1", "FLOAT"),
        ("INT4", "INT8"),
        ("UINT4", "UINT8"),
    )
    if hasattr(TensorProto, narrow)
}
"""Element types numpy cannot hold -> a type onnxruntime casts them to without changing any value."""

_WIDE_SUFFIX = "__dmlshim_capture_wide"


def capture_session_options() -> ort.SessionOptions:
    """One thread, no graph optimisation: the captured values are what each unfused node really reads."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return so


def _session(model: onnx.ModelProto, shared: SharedWeights | None) -> Any:
    options = capture_session_options()
    if shared is not None:
        # the weights ``model`` holds as placeholders or file references: read by onnxruntime from the
        # model's files, or handed as arrays; never serialized
        shared.attach(options, model)
    return OrtInferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _narrow_elem(type_string: str) -> int | None:
    tp = type_from_ort(type_string)
    if tp is None or not tp.HasField("tensor_type"):
        return None
    elem = int(tp.tensor_type.elem_type)
    return elem if elem in _WIDENING else None


def _wide_name(name: str, taken: set[str]) -> str:
    wide, k = f"{name}{_WIDE_SUFFIX}", 1
    while wide in taken:
        k += 1
        wide = f"{name}{_WIDE_SUFFIX}{k}"
    taken.add(wide)
    return wide


def _ort_feed(value: Any) -> Any:
    """A feed onnxruntime takes: ml_dtypes arrays go in as OrtValues of their ONNX element type."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "V":
        try:
            elem = int(helper.np_dtype_to_tensor_dtype(value.dtype))
        except (KeyError, TypeError, ValueError):
            return value
        if elem in _WIDENING:
            bits = np.ascontiguousarray(value).view(np.uint8 if value.dtype.itemsize == 1 else np.uint16)
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx_element_type=elem)
    return value


class CaptureRunner:
    """A CPU session over ``model`` whose graph outputs include ``outputs``; ``run`` returns them as numpy
    arrays (ml_dtypes arrays for bfloat16, float8 and 4-bit values), sequences as lists.

    ``shared``: the large initializers ``model`` holds without their bytes
    (:func:`dmlshim.execute.weights.shared.light_copy`); None when it holds them all.

    Raises whatever onnxruntime raises when it cannot load the model (the caller words the error).
    """

    def __init__(
        self, model: onnx.ModelProto, outputs: Sequence[str], shared: SharedWeights | None = None
    ) -> None:
        self.outputs = list(outputs)
        session = _session(model, shared)
        wanted = set(self.outputs)
        narrow = {
            arg.name: elem
            for arg in session.get_outputs()
            if arg.name in wanted and (elem := _narrow_elem(arg.type)) is not None
        }
        #: output name -> (the name fetched, the numpy dtype to turn it back into)
        self._fetch: dict[str, tuple[str, np.dtype | None]] = {n: (n, None) for n in self.outputs}
        if narrow:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            taken = {n for node in copy.graph.node for n in node.output} | {v.name for v in copy.graph.input}
            taken |= {t.name for t in copy.graph.initializer}
            for name, elem in narrow.items():
                wide = _wide_name(name, taken)
                copy.graph.node.append(helper.make_node("Cast", [name], [wide], to=_WIDENING[elem]))
                copy.graph.output.append(onnx.ValueInfoProto(name=wide))
                back = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
                if back.itemsize > 2 or (back.itemsize == 2) != (elem == TensorProto.BFLOAT16):
                    raise NotSupportedError(
                        f"capturing {TensorProto.DataType.Name(elem)} values needs an onnx whose numpy "
                        f"types come from ml_dtypes (onnx 1.18 or newer); onnx {onnx.__version__} maps "
                        f"them to {back}",
                        tensor=name,
                    )
                self._fetch[name] = (wide, back)
            session = _session(copy, shared)
        self.session = session

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        """The values of the outputs on ``feeds``, in order."""
        names = [self._fetch[n][0] for n in self.outputs]
        results = self.session.run(names, {k: _ort_feed(v) for k, v in feeds.items()})
        out: list[Any] = []
        for name, value in zip(self.outputs, results, strict=True):
            dtype = self._fetch[name][1]
            out.append(np.asarray(value).astype(dtype) if dtype is not None else value)
        return out
