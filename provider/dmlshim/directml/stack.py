"""Where the real-DirectML stack lives, and ``stack.json``: what was set up and how to run under it.

``dmlshim directml setup`` writes ``stack.json`` into the stack folder once every piece is in place and a
one-node model ran on DirectML. Everything else (the ``directml`` engine on Linux, tests, the C replay
program) reads the stack from that file only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EngineUnavailableError
from .wine import STACK_FILE, cache_root, read_stack_doc, stack_dir, stack_file, windows_path, wine_env

SCHEMA_VERSION = 1

__all__ = [
    "SCHEMA_VERSION", "STACK_FILE", "Stack", "cache_root", "load_stack", "stack_available", "stack_dir",
    "stack_file", "windows_path",
]  # fmt: skip


@dataclass(frozen=True)
class Stack:
    """The contents of ``stack.json``.

    Attributes:
        folder: the stack folder.
        wine: the Wine loader to run Windows programs with (``wine64``).
        wineserver: the matching wineserver (to wait for or stop a prefix).
        env: environment variables to run under it (WINEPREFIX, VK_ICD_FILENAMES, WINEDEBUG,
            WINEDLLOVERRIDES, LD_LIBRARY_PATH, ...), added to the caller's environment.
        bin_dir: the folder with ``node.exe`` and the Wine 10 D3D DLLs (d3d12, d3d12core, dxgi, wined3d).
        node_exe: the Windows ``node.exe``.
        node_modules: the folder with onnxruntime-node and onnxruntime-common (NODE_PATH).
        ort_binding_dir: the folder with onnxruntime-node's Windows binding, ``onnxruntime.dll`` and
            ``DirectML.dll`` (the ones the host process loads).
        dml_dir: the folder with the wheel's ``DirectML.dll`` and ``onnxruntime.dll`` (for programs that
            call DirectML directly).
        versions: component -> version (directml, onnxruntime_node, onnxruntime_dll, wine_runtime,
            wine_d3d, vkd3d, mesa, node).
        raw: the whole JSON document.
    """

    folder: Path
    wine: str
    wineserver: str
    env: dict[str, str]
    bin_dir: Path
    node_exe: Path
    node_modules: Path
    ort_binding_dir: Path
    dml_dir: Path
    versions: dict[str, str]
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def run_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for a Windows process of this stack (``base``, os.environ by default, plus
        the stack's variables)."""
        return wine_env(self.env, base)

    def describe(self) -> str:
        """One line naming what runs: DirectML, onnxruntime, the D3D12 and Vulkan layers."""
        v = self.versions
        return (
            f"DirectML {v.get('directml', '?')} via onnxruntime-node {v.get('onnxruntime_node', '?')} "
            f"(Windows node {v.get('node', '?')}) on D3D12 = vkd3d {v.get('vkd3d', '?')} with DXIL "
            f"(Wine {v.get('wine_d3d', '?')} d3d12/wined3d under Wine {v.get('wine_runtime', '?')}), "
            f"Vulkan = Mesa {v.get('mesa', '?')} lavapipe"
        )


def load_stack(folder: Path | None = None) -> Stack:
    """Read ``stack.json``.

    Raises:
        EngineUnavailableError: the stack has not been set up (no stack.json) or the file is unreadable
            or names files that are gone.
    """
    path = stack_file(folder)
    doc = read_stack_doc(
        path,
        hint="run `dmlshim directml setup` (Debian/Ubuntu, root for apt) to build the Wine + vkd3d + "
        "lavapipe stack",
    )
    try:
        stack = Stack(
            folder=Path(doc["folder"]),
            wine=doc["wine"],
            wineserver=doc["wineserver"],
            env={str(k): str(v) for k, v in doc["env"].items()},
            bin_dir=Path(doc["bin_dir"]),
            node_exe=Path(doc["node_exe"]),
            node_modules=Path(doc["node_modules"]),
            ort_binding_dir=Path(doc["ort_binding_dir"]),
            dml_dir=Path(doc["dml_dir"]),
            versions={str(k): str(v) for k, v in doc["versions"].items()},
            raw=doc,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise EngineUnavailableError(
            f"{path} is not a stack description dmlshim wrote (missing {exc}); run `dmlshim directml setup`",
            value=str(path),
        ) from exc
    missing = [str(p) for p in (Path(stack.wine), stack.node_exe, stack.bin_dir) if not p.exists()]
    if missing:
        raise EngineUnavailableError(
            f"the DirectML stack in {stack.folder} is incomplete ({', '.join(missing)} gone); run "
            "`dmlshim directml setup` again",
            value=missing[0],
        )
    return stack


def stack_available(folder: Path | None = None) -> bool:
    """Whether a complete stack is set up (``stack.json`` readable and its files present)."""
    try:
        load_stack(folder)
    except EngineUnavailableError:
        return False
    return True
