"""dmlshim in place of onnxruntime, for programs that cannot be edited.

Three ways to bind it (docs/coming-from.md shows each):

* ``dmlshim.install()`` (or :func:`dmlshim.ort.install`) before the program imports onnxruntime;
* ``python -m dmlshim.ort app.py ARGS`` for an unmodified script (worker processes included);
* by hand: ``onnxruntime.InferenceSession = dmlshim.InferenceSession``, or
  ``sys.modules["onnxruntime"] = dmlshim.ort.standin_module()``.

This package is imported by every engine (for :mod:`dmlshim.runtime.real`), so it stays light: the rest loads
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .install import install, installed, summary, uninstall
    from .standin import standin_module

_LAZY = {
    "install": "install",
    "installed": "install",
    "summary": "install",
    "uninstall": "install",
    "standin_module": "standin",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["install", "installed", "standin_module", "summary", "uninstall"]
