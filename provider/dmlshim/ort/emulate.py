"""``DMLSHIM_ORT_EMULATE``: which sessions emulate DirectML when a program cannot be told to ask for it.

``asked`` (the default): a session emulates DirectML when it asks for ``DmlExecutionProvider`` or names no
provider, as onnxruntime-directml would run it. ``all``: ``DmlExecutionProvider`` is put first in every
session's providers, for clients that ask for the CPU by default (optimum does) or that check
onnxruntime's own provider list before asking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

EMULATE_ENV = "DMLSHIM_ORT_EMULATE"
ENGINE_ENV = "DMLSHIM_ORT_ENGINE"
"""The engine of every emulated session that does not pass ``engine=`` itself (``python -m dmlshim.ort
--engine``): ``customop`` emulates the gather/scatter nodes inside If/Loop/Scan bodies too."""
EMULATE_CHOICES = ("asked", "all")
_DML_EP = "DmlExecutionProvider"


def emulate_all() -> bool:
    """Whether ``$DMLSHIM_ORT_EMULATE`` is ``all``."""
    return os.environ.get(EMULATE_ENV, "asked").strip().lower() == "all"


def chosen_engine() -> str | None:
    """The engine ``$DMLSHIM_ORT_ENGINE`` names, or None (unset or empty: the default engine)."""
    return os.environ.get(ENGINE_ENV, "").strip() or None


def with_dml_first(providers: Any, provider_options: Any) -> tuple[Any, Any]:
    """``providers`` (and ``provider_options``) with ``DmlExecutionProvider`` first when it is missing;
    None (every available provider, DirectML included) and malformed values are left as they are."""
    if providers is None or isinstance(providers, (str, bytes)) or not isinstance(providers, Sequence):
        return providers, provider_options
    names = [p[0] if isinstance(p, tuple) and p else p for p in providers]
    if _DML_EP in names:
        return providers, provider_options
    if provider_options is not None and isinstance(provider_options, Sequence):
        return [_DML_EP, *providers], [{}, *provider_options]
    if any(isinstance(p, tuple) for p in providers):
        return [(_DML_EP, {}), *providers], provider_options
    return [_DML_EP, *providers], provider_options
