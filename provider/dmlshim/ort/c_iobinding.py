"""``onnxruntime.capi._pybind_state.SessionIOBinding(session._sess)`` on a dmlshim session.

onnxruntime's tests (and a few libraries) build the C++ binding directly from a session's ``_sess`` and run
it with ``session._sess.run_with_iobinding(binding, run_options)``. A dmlshim session's ``_sess`` is no C++
session, so onnxruntime's class refuses it. When dmlshim is imported, ``SessionIOBinding`` in onnxruntime's
binding module becomes a subclass that builds onnxruntime's own binding for onnxruntime's sessions (exactly
as before) and, for a dmlshim session's ``_sess``, a binding with the C++ methods' signatures (an
``OrtDevice`` where the Python class takes a device name and id) over dmlshim's :class:`IOBinding`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..runtime.real import C
from .attributes import SessionCore
from .iobinding import IOBinding

_DEVICE_NAMES = {"cpu": "cpu", "cuda": "cuda", "dml": "dml", "npu": "npu", "gpu": "gpu"}


def _device(device: Any) -> tuple[str, int]:
    """An ``OrtDevice`` as the device name and id onnxruntime's Python binding takes."""
    if isinstance(device, str):
        return device, 0
    kind = device.device_type()
    name = (
        "cpu"
        if kind == C.OrtDevice.cpu()
        else next(
            (n for n in ("cuda", "dml", "npu") if getattr(C.OrtDevice, n, lambda: None)() == kind), "gpu"
        )
    )
    return _DEVICE_NAMES[name], int(device.device_id())


class DmlshimSessionIOBinding:
    """The C++ binding's methods over dmlshim's :class:`IOBinding` (what ``run_with_iobinding`` runs)."""

    def __init__(self, core: SessionCore) -> None:
        self.dmlshim_binding = IOBinding(core._session)

    def bind_input(self, name: str, *args: Any) -> None:
        if len(args) == 1:  # bind_input(name, ndarray)
            self.dmlshim_binding.bind_cpu_input(name, args[0])
            return
        device, element_type, shape, pointer = args
        self.dmlshim_binding.bind_input(name, *_device(device), element_type, shape, pointer)

    def bind_output(
        self, name: str, device: Any = None, element_type: Any = None, shape: Sequence[int] | None = None,
        pointer: int | None = None,
    ) -> None:  # fmt: skip
        device_name, device_id = _device(device) if device is not None else ("cpu", 0)
        if pointer is None:  # bind_output(name, device): allocated by the run
            self.dmlshim_binding.bind_output(name, device_name, device_id)
            return
        self.dmlshim_binding.bind_output(name, device_name, device_id, element_type, shape, pointer)

    def bind_ortvalue_input(self, name: str, value: Any) -> None:
        self.dmlshim_binding.bind_ortvalue_input(name, _wrapped(value))

    def bind_ortvalue_output(self, name: str, value: Any) -> None:
        self.dmlshim_binding.bind_ortvalue_output(name, _wrapped(value))

    def __getattr__(self, name: str) -> Any:  # clear_binding_*, get_outputs, synchronize_* ...
        return getattr(self.dmlshim_binding, name)


def _wrapped(value: Any) -> Any:
    from ..runtime.real import ort

    return ort.OrtValue(value) if isinstance(value, C.OrtValue) else value


_Real = C.SessionIOBinding


class SessionIOBinding(_Real):  # type: ignore[misc, valid-type]
    """onnxruntime's ``SessionIOBinding``, which also takes a dmlshim session's ``_sess``."""

    def __new__(cls, session: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(session, SessionCore):
            return DmlshimSessionIOBinding(session)
        return super().__new__(cls, session, *args, **kwargs)


def bind_c_iobinding() -> None:
    """Put :class:`SessionIOBinding` in onnxruntime's binding module (once)."""
    if C.SessionIOBinding is _Real:
        C.SessionIOBinding = SessionIOBinding
