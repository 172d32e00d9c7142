"""Importing onnxruntime-extensions without what only its model converters use.

``import onnxruntime_extensions`` runs its converter module (``cvt.py``), which tries ``transformers``,
``tokenizers`` and ``torch`` for its Hugging Face and Whisper pre-processing graphs: where they are
installed, the custom-op engine's first session paid for importing them (7.8 s and 350 MB of peak RSS
against 0.5 s and 62 MB on the 2-core VM), though it only registers custom ops. The same module sets
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` in the environment, which every Python child process
the program starts afterwards would inherit (protobuf's slow pure-Python parser).

:func:`import_extensions` imports the package with those three modules unavailable to the importing thread
alone, when the process has not imported them itself (then the package gets them as it would), and puts the
environment variable back as it was.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["import_extensions"]

_CONVERTER_ONLY = ("torch", "transformers", "tokenizers")
_PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
_LOCK = threading.Lock()


class _Unavailable:
    """A meta-path finder that answers "not installed" for ``names`` on one thread only."""

    def __init__(self, names: Sequence[str], thread: int) -> None:
        self._names = frozenset(names)
        self._thread = thread

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        root = fullname.partition(".")[0]
        if root in self._names and threading.get_ident() == self._thread:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def import_extensions() -> ModuleType:
    """The ``onnxruntime_extensions`` module, imported without its converters' optional dependencies.

    Raises:
        ImportError: onnxruntime-extensions is not installed.
    """
    found = sys.modules.get("onnxruntime_extensions")
    if found is not None:
        return found
    with _LOCK:
        finder = _Unavailable([m for m in _CONVERTER_ONLY if m not in sys.modules], threading.get_ident())
        env = os.environ.get(_PROTOBUF_ENV)
        sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
        try:
            return importlib.import_module("onnxruntime_extensions")
        finally:
            sys.meta_path.remove(finder)  # type: ignore[arg-type]
            if env is None:
                os.environ.pop(_PROTOBUF_ENV, None)
            else:
                os.environ[_PROTOBUF_ENV] = env
