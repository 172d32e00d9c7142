"""Build Wine 10's D3D12 DLLs (d3d12, d3d12core, dxgi, wined3d with vkd3d inside) from Debian's source
package, with the two changes DirectML needs.

The changes are ours and applied here, at build time, to the unpacked source:

- vkd3d's ``ID3D12Device::EnumerateMetaCommands`` is a stub returning E_NOTIMPL, and ``DMLCreateDevice``
  gives up on it (0x80004001). It now reports zero meta commands with S_OK, which DirectML accepts.
- vkd3d reads DXIL shaders only when built with ``VKD3D_SHADER_UNSUPPORTED_DXIL``; several DirectML
  kernels (embedding Gather, ScatterElements, reductions) ship DXIL only.

Debian's repack strips generated files (configure, Vulkan/OpenGL headers, icons, test media, Unicode
tables). The ones these four DLLs need are regenerated with Wine's own generators (the Vulkan and OpenGL
registries from Debian packages); the others are replaced by empty placeholders so that Wine's makefile
generator can run, and are never built.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import EngineUnavailableError

logger = logging.getLogger(__name__)

PATCH_LEVEL = "3"
"""Bumped whenever the changes below change: a stack built at another level is rebuilt."""

TARGET_DLLS = ("wined3d", "d3d12", "d3d12core", "dxgi")
"""The PE DLLs built and placed beside node.exe (vkd3d is linked into wined3d.dll)."""

_META_STUB = """    FIXME("iface %p, num_meta_commands %p, command_desc %p stub!\\n", iface,
            num_meta_commands, command_desc);

    return E_NOTIMPL;"""
_META_FIXED = """    FIXME("iface %p, num_meta_commands %p, command_desc %p stub!\\n", iface,
            num_meta_commands, command_desc);

    /* dmlshim: DirectML refuses a device whose EnumerateMetaCommands fails; report none. */
    if (!num_meta_commands)
        return E_INVALIDARG;
    *num_meta_commands = 0;
    return S_OK;"""
_DXIL_FLAG = "-DVKD3D_SHADER_UNSUPPORTED_DXIL"
_PLACEHOLDER_LISTS = re.compile(r"^\s*(SOURCES|EXTRA_SRCS|SVG_SRCS|FONT_SRCS|NLS_SRCS)\s*=(.*)$", re.M)
_RC_FILE = re.compile(
    r"([A-Za-z0-9_./\-]+\.(?:ico|bmp|cur|avi|wav|mp3|mp4|mpg|ttf|otf|fon|nls|chm|png|gif|jpg|ani|tlb))\b"
)

Runner = Callable[[list[str], Path, str], None]


def _fail(piece: str, detail: str) -> EngineUnavailableError:
    return EngineUnavailableError(f"building Wine's D3D12 DLLs: {piece}: {detail}", value=piece)


_KEEP_ALIVE_MARK = "dmlshim: keep winevulkan"
_KEEP_ALIVE = """
/* dmlshim: keep winevulkan.dll loaded for the life of the process. The Wine that runs these DLLs (8.0)
 * forwards vulkan-1.dll to winevulkan.dll without holding a reference: when onnxruntime releases its DXGI
 * factory, wined3d's last reference goes and winevulkan is unloaded while vkd3d still calls into it (an
 * "Unhandled page fault on execute access"). */
BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, void *reserved)
{
    if (reason == DLL_PROCESS_ATTACH)
    {
        DisableThreadLibraryCalls(instance);
        LoadLibraryA("winevulkan.dll");
    }
    return TRUE;
}
"""


def patch_d3d12(tree: Path) -> None:
    """Give d3d12.dll a DllMain that pins winevulkan.dll (idempotent)."""
    main = tree / "dlls/d3d12/d3d12_main.c"
    text = main.read_text(encoding="utf-8")
    if _KEEP_ALIVE_MARK in text:
        return
    anchor = '#include "windef.h"\n'
    if anchor not in text or "DllMain" in text:
        raise _fail("d3d12 keep-alive patch", f"{main} is not the d3d12_main.c this patch knows")
    text = text.replace(anchor, "#include <stdarg.h>\n" + anchor + '#include "winbase.h"\n', 1) + _KEEP_ALIVE
    main.write_text(text, encoding="utf-8")


def patch_vkd3d(tree: Path) -> None:
    """Apply dmlshim's changes: two to vkd3d, one to d3d12 (idempotent)."""
    patch_d3d12(tree)
    device = tree / "libs/vkd3d/libs/vkd3d/device.c"
    text = device.read_text(encoding="utf-8")
    if "*num_meta_commands = 0;" not in text:
        if _META_STUB not in text:
            raise _fail(
                "vkd3d EnumerateMetaCommands patch", f"{device} has no stub to replace (another vkd3d?)"
            )
        device.write_text(text.replace(_META_STUB, _META_FIXED, 1), encoding="utf-8")
    makefile = tree / "libs/vkd3d/Makefile.in"
    text = makefile.read_text(encoding="utf-8")
    if _DXIL_FLAG not in text:
        anchor = "\t-DLIBVKD3D_UTILS_SOURCE\n"
        if anchor not in text:
            raise _fail("vkd3d DXIL flag", f"{makefile} has no EXTRADEFS entry {anchor.strip()}")
        text = text.replace(anchor, f"\t-DLIBVKD3D_UTILS_SOURCE \\\n\t{_DXIL_FLAG}\n", 1)
        makefile.write_text(text, encoding="utf-8")


def _touch(path: Path) -> bool:
    if path.exists() or not path.parent.is_dir():
        return False
    path.touch()
    return True


def _excluded_files(debian: Path) -> list[str]:
    """The plain paths (no wildcard) of debian/copyright's Files-Excluded: what the repack stripped."""
    lines = (debian / "copyright").read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("Files-Excluded:") + 1
    except ValueError:
        return []
    paths = []
    for line in lines[start:]:
        if not line.startswith(" "):
            break
        if "*" not in line:
            paths.append(line.strip())
    return paths


def add_placeholders(tree: Path, debian: Path) -> int:
    """Create empty stand-ins for stripped files Wine's makedep reads but these DLLs never build: files
    an .rc names, sources a Makefile.in lists (unless its PARENTSRC has them), and Files-Excluded."""
    count = 0
    for rel in _excluded_files(debian):
        if rel not in ("configure", "include/config.h.in") and not rel.startswith("tools/config."):
            count += _touch(tree / rel)
    for rc in glob.glob(str(tree / "**/*.rc"), recursive=True):
        base = Path(rc).parent
        for match in _RC_FILE.finditer(Path(rc).read_text(encoding="utf-8", errors="replace")):
            count += _touch(base / match.group(1))
    for mk in glob.glob(str(tree / "**/Makefile.in"), recursive=True):
        base = Path(mk).parent
        text = Path(mk).read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
        parent = re.search(r"^PARENTSRC\s*=\s*(\S+)", text, re.M)
        parent_dir = (base / parent.group(1)).resolve() if parent else None
        for listing in _PLACEHOLDER_LISTS.finditer(text):
            for name in listing.group(2).split():
                if parent_dir is not None and (parent_dir / name).exists():
                    continue
                target = base / name
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
                    count += 1
    return count


def prepare_tree(tree: Path, debian: Path, vk_registry: Path, run: Runner) -> None:
    """Regenerate what the repack stripped and these DLLs need, patch vkd3d, configure (PE side, mingw)."""
    patch_vkd3d(tree)
    if (tree / "Makefile").exists():
        return
    tools = tree / "tools"
    for name in ("config.sub", "config.guess"):
        link = tools / name
        if not link.exists():
            os.symlink(f"/usr/share/misc/{name}", link)
    opengl = tree / "dlls/opengl32/make_opengl"
    if "khronos-api" not in opengl.read_text(encoding="utf-8"):
        run(
            ["patch", "-p1", "-i", str(debian / "patches/generate/opengl.patch")],
            tree,
            "OpenGL generator patch",
        )
    run(["autoreconf", "-f"], tree, "autoreconf (configure)")
    run(["perl", "tools/make_requests"], tree, "make_requests (server protocol headers)")
    run(["perl", "tools/make_specfiles"], tree, "make_specfiles (syscall tables)")
    run(["perl", "./make_opengl"], tree / "dlls/opengl32", "make_opengl (wine/wgl.h)")
    run(
        ["python3", "./make_vulkan", "-x", str(vk_registry / "vk.xml"), "-X", str(vk_registry / "video.xml")],
        tree / "dlls/winevulkan",
        "make_vulkan (wine/vulkan.h)",
    )
    added = add_placeholders(tree, debian)
    logger.info("%d placeholders for stripped files", added)
    run(
        ["./configure", "--enable-win64", "--without-x", "--without-freetype", "--disable-tests"],
        tree,
        "configure (Wine 10, PE side with mingw)",
    )


def build_dlls(tree: Path, out: Path, run: Runner, jobs: int | None = None) -> dict[str, Path]:
    """``make`` the target DLLs and copy them into ``out``; returns name -> copied file."""
    jobs = jobs or max(1, min(os.cpu_count() or 1, 4))
    targets = [f"dlls/{name}/all" for name in TARGET_DLLS]
    run(["make", f"-j{jobs}", *targets], tree, "make " + " ".join(targets))
    placed: dict[str, Path] = {}
    out.mkdir(parents=True, exist_ok=True)
    for name in TARGET_DLLS:
        candidates = [tree / f"dlls/{name}/x86_64-windows/{name}.dll", tree / f"dlls/{name}/{name}.dll"]
        built = next((c for c in candidates if c.is_file()), None)
        if built is None:
            raise _fail(f"{name}.dll", f"make finished but none of {', '.join(map(str, candidates))} exists")
        shutil.copy2(built, out / f"{name}.dll")
        as_native(out / f"{name}.dll")
        placed[name] = out / f"{name}.dll"
    return placed


BUILTIN_MARK = b"Wine builtin DLL"


def as_native(dll: Path) -> None:
    """Clear winebuild's "Wine builtin DLL" mark in the DOS stub: the Wine that runs them (another
    version) refuses a DLL so marked where its load order says native (c0000135), and these must load
    from node.exe's folder in place of its own d3d12/dxgi/wined3d."""
    data = bytearray(dll.read_bytes())
    at = data.find(BUILTIN_MARK, 0, 0x100)
    if at >= 0:
        data[at : at + len(BUILTIN_MARK)] = bytes(len(BUILTIN_MARK))
        dll.write_bytes(bytes(data))


def vkd3d_version(tree: Path) -> str:
    """The vkd3d version bundled in the Wine tree (``PACKAGE_VERSION`` of libs/vkd3d/config.h)."""
    config = tree / "libs/vkd3d/config.h"
    if config.exists():
        found = re.search(
            r'PACKAGE_VERSION\s+"([^"]+)"', config.read_text(encoding="utf-8", errors="replace")
        )
        if found:
            return found.group(1)
    return "unknown"
