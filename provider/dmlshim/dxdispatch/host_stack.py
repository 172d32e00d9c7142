"""Where real DirectML is: the stack description ``dmlshim directml setup`` writes (``stack.json``).

The replay host needs a Wine to run under (on Linux), the environment that makes Wine's D3D12 run on
Vulkan (``WINEPREFIX``, ``VK_ICD_FILENAMES``, ``DISPLAY``, ...) and the ``DirectML.dll`` to load. The
file lives at ``<cache>/directml/stack.json``; ``$DMLSHIM_DIRECTML_STACK`` names another one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..directml.wine import StackMissingError, read_stack_doc, stack_file
from ..errors import BadInputError

__all__ = ["HostStack", "StackMissingError", "default_stack_path", "load_stack"]

STACK_ENV = "DMLSHIM_DIRECTML_STACK"


@dataclass(frozen=True)
class HostStack:
    """What running a Windows program on DirectML takes here.

    Attributes:
        directml_dll: the DirectML.dll to load.
        dll_dir: a folder searched for d3d12.dll and dxgi.dll before the system folder (the stack's own
            D3D12 layer), or None.
        launcher: the command that runs a Windows .exe (``[wine]`` on Linux; empty on Windows).
        env: environment variables to set for it.
        source: the stack.json this came from (None when built by hand).
        description: the stack's own summary (versions of Wine, vkd3d, Mesa, DirectML), for records.
    """

    directml_dll: Path
    dll_dir: Path | None = None
    launcher: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None
    description: Mapping[str, Any] = field(default_factory=dict)


def default_stack_path() -> Path:
    """``$DMLSHIM_DIRECTML_STACK``, else ``<cache>/directml/stack.json``."""
    explicit = os.environ.get(STACK_ENV)
    if explicit:
        return Path(explicit)
    return stack_file()


def load_stack(path: str | os.PathLike[str] | None = None) -> HostStack:
    """Read ``stack.json``.

    Raises:
        StackMissingError: the file does not exist (set the stack up first).
        BadInputError: it is not a stack description, or names files that are gone.
    """
    target = Path(path) if path is not None else default_stack_path()
    doc = read_stack_doc(target, hint=f"run `dmlshim directml setup`, or name one with ${STACK_ENV}")
    return stack_from_json(doc, source=target)


def _first(doc: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if doc.get(key) not in (None, ""):
            return doc[key]
    return None


def stack_from_json(doc: Mapping[str, Any], *, source: Path | None = None) -> HostStack:
    """A :class:`HostStack` from a stack.json document."""
    where = str(source) if source else "stack.json"
    dll = _first(doc, "directml_dll")
    if dll is None:
        folder = _first(doc, "dml_dir", "directml_dir")
        if folder is not None:
            dll = str(Path(folder) / "DirectML.dll")
    if dll is None:
        raise BadInputError("stack.json names no DirectML.dll (directml_dll or dml_dir)", path=where)
    dll_path = Path(dll)
    if not dll_path.is_file():
        raise BadInputError("stack.json's DirectML.dll is gone: set the stack up again", path=str(dll_path))
    env_doc = doc.get("env") or {}
    if not isinstance(env_doc, dict):
        raise BadInputError("stack.json's env is not an object", path=where)
    env = {str(k): str(v) for k, v in env_doc.items()}
    launcher: tuple[str, ...] = ()
    if sys.platform != "win32":
        wine = _first(doc, "wine", "wine_binary", "wine64")
        if wine is None:
            raise BadInputError("stack.json names no wine binary", path=where)
        launcher = (str(wine),)
    dll_dir = _first(doc, "bin_dir", "dll_dir")
    description = {k: v for k, v in doc.items() if k != "env"}
    return HostStack(dll_path, Path(dll_dir) if dll_dir else None, launcher, env, source, description)
