"""Build the DirectML replay host (``host/dml_replay_host.c``, shipped with dmlshim) with mingw-w64.

The executable is cached under ``<cache>/directml/host/``, named after a hash of the source and the
compiler, so a changed source or compiler builds anew and a warm cache costs nothing. The cache folder is
:func:`dmlshim.directml.wine.cache_root`.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..directml.wine import cache_root, stack_dir
from ..errors import BadInputError
from ..fileio.files import write_bytes

log = logging.getLogger(__name__)

__all__ = ["HOST_SOURCE", "build_host", "cache_dir", "find_compiler"]

HOST_SOURCE = Path(__file__).parent / "host" / "dml_replay_host.c"
"""The C source of the replay host (ours; it declares the few DirectML interfaces it calls)."""

COMPILERS = ("x86_64-w64-mingw32-gcc-posix", "x86_64-w64-mingw32-gcc", "x86_64-w64-mingw32-gcc-win32")
"""mingw-w64 C compilers tried in order (Debian: package gcc-mingw-w64-x86-64-posix)."""

_FLAGS = ("-O2", "-std=c11", "-Wall", "-s", "-static-libgcc")
_LIBS = ("-lversion",)
_BUILD_TIMEOUT_S = 300


def cache_dir() -> Path:
    """dmlshim's cache folder (:func:`dmlshim.directml.wine.cache_root`)."""
    return cache_root()


def find_compiler() -> str:
    """The first mingw-w64 x86-64 C compiler on PATH.

    Raises:
        BadInputError: none is installed (naming the Debian package that brings one).
    """
    for name in COMPILERS:
        found = shutil.which(name)
        if found:
            return found
    raise BadInputError(
        "no mingw-w64 C compiler found (tried " + ", ".join(COMPILERS) + "): the DirectML replay host is "
        "built from source; install Debian's gcc-mingw-w64-x86-64-posix"
    )


def _compiler_version(compiler: str) -> str:
    try:
        done = subprocess.run(
            [compiler, "-dumpfullversion"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise BadInputError(f"cannot run the compiler: {exc}", path=compiler) from exc
    return done.stdout.strip()


def build_host(*, compiler: str | None = None, target_dir: Path | None = None) -> Path:
    """The replay host executable, built if the cache does not hold one for this source and compiler.

    Args:
        compiler: a mingw-w64 gcc (default: :func:`find_compiler`).
        target_dir: where the executable is kept (default ``<cache>/directml/host``).

    Returns:
        The path of ``dml_replay_host-<hash>.exe``.

    Raises:
        BadInputError: no compiler, or the build failed (with the compiler's first error lines).
    """
    cc = compiler or find_compiler()
    source = HOST_SOURCE.read_bytes()
    digest = hashlib.sha256(
        source + b"\0" + _compiler_version(cc).encode() + b"\0" + " ".join(_FLAGS + _LIBS).encode()
    )
    folder = target_dir or stack_dir() / "host"
    exe = folder / f"dml_replay_host-{digest.hexdigest()[:16]}.exe"
    if exe.is_file() and not exe.is_symlink():
        return exe
    folder.mkdir(parents=True, exist_ok=True)
    log.info("building the DirectML replay host with %s", cc)
    with tempfile.TemporaryDirectory(prefix="dmlshim-host-") as tmp:
        built = Path(tmp) / "host.exe"
        try:
            done = subprocess.run(
                [cc, *_FLAGS, "-o", str(built), str(HOST_SOURCE), *_LIBS],
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BadInputError(
                f"building the DirectML replay host failed: {exc}", path=str(HOST_SOURCE)
            ) from exc
        if done.returncode != 0 or not built.is_file():
            first = "\n".join((done.stderr or done.stdout).strip().splitlines()[:12])
            raise BadInputError(
                f"building the DirectML replay host failed (exit {done.returncode}):\n{first}",
                path=str(HOST_SOURCE),
            )
        write_bytes(exe, built.read_bytes(), overwrite=True)
    exe.chmod(0o755)
    return exe
