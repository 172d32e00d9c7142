"""The ``OrtValue`` onnxruntime's ``IOBinding.get_outputs()`` holds for an output bound by name that no run
has allocated yet: a value with nothing in it (``has_value()`` False, ``is_tensor()`` False; ``shape()``,
``numpy()``, ``data_ptr()`` raise onnxruntime's ``RuntimeError``). It is onnxruntime's own empty value,
taken once from a binding of a one-node onnxruntime session; only ``data_type()``, which kills onnxruntime
1.32's process on it (SIGSEGV), raises a ``RuntimeError`` here instead.
"""

from __future__ import annotations

import functools
from typing import Any

from onnx import TensorProto, helper

from ..errors import BadInputError
from ..runtime.exceptions import as_plain_runtime_error
from ..runtime.real import OrtInferenceSession, OrtIOBinding, ort

__all__ = ["unallocated_error", "unallocated_ortvalue"]


def unallocated_error(name: str) -> Exception:
    """The error for reading the value of output ``name``, bound by name and never run: a
    ``BadInputError`` and a plain ``RuntimeError``, as onnxruntime's refusals of the empty value are (its
    ``data_type()`` and ``copy_outputs_to_cpu()`` kill the process with SIGSEGV instead)."""
    error = BadInputError(
        f"output {name!r} is bound by name and holds no value until a run allocates it; call "
        "run_with_iobinding first, or bind it to memory (bind_output with a buffer, bind_ortvalue_output)",
        tensor=name,
        rule="an output bound by name holds a value only after a run",
    )
    return as_plain_runtime_error(error)


@functools.cache
def _empty_c_value() -> Any:
    """onnxruntime's own empty ``OrtValue`` (its C++ object), from a one-node session's binding."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = OrtInferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    binding = OrtIOBinding(session)
    binding.bind_output("y")
    (value,) = binding.get_outputs()
    return value._ortvalue


class UnallocatedOrtValue(ort.OrtValue):  # type: ignore[misc, name-defined]
    """onnxruntime's empty ``OrtValue`` for output ``name``; ``data_type()`` raises instead of crashing."""

    def __init__(self, name: str) -> None:
        super().__init__(_empty_c_value())
        self.output_name = name

    def data_type(self) -> str:
        raise unallocated_error(self.output_name)


def unallocated_ortvalue(name: str) -> Any:
    """What onnxruntime's ``IOBinding.get_outputs()`` gives for output ``name`` bound by name, never run."""
    return UnallocatedOrtValue(name)
