"""What every Windows program of the real-DirectML stack needs under Wine, in one place.

The stack folder and its ``stack.json``, the environment a Windows process runs in, Wine's path names,
and the one Xvfb of this Python process. Both the ``directml`` engine (node.exe + onnxruntime-node) and
the DxDispatch replay host (:mod:`dmlshim.dxdispatch.host_run`) use these; nothing here knows either.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BadInputError, EngineUnavailableError
from ..portable import user_cache_dir

logger = logging.getLogger(__name__)

__all__ = [
    "STACK_FILE",
    "StackFileError",
    "StackMissingError",
    "cache_root",
    "read_stack_doc",
    "shared_display",
    "stack_dir",
    "stack_file",
    "stop_display",
    "windows_path",
    "wine_env",
]

STACK_FILE = "stack.json"
XVFB_START_TIMEOUT = 20.0


class StackFileError(BadInputError, EngineUnavailableError):
    """``stack.json`` is unreadable or not a stack description (an engine error and an input error both,
    so callers of either loader catch it as they always did)."""


class StackMissingError(StackFileError):
    """No stack.json: real DirectML has not been set up on this machine."""


def cache_root() -> Path:
    """dmlshim's cache folder (:func:`dmlshim.portable.user_cache_dir`: ``$DMLSHIM_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/dmlshim``, else ``~/.cache/dmlshim`` on Linux)."""
    return Path(user_cache_dir())


def stack_dir() -> Path:
    """The folder holding the whole stack (downloads, builds, Wine prefix, ``stack.json``)."""
    return cache_root() / "directml"


def stack_file(folder: Path | None = None) -> Path:
    """The path of ``stack.json`` in ``folder`` (:func:`stack_dir` by default)."""
    return (folder or stack_dir()) / STACK_FILE


def read_stack_doc(path: Path, *, hint: str = "run `dmlshim directml setup`") -> dict[str, Any]:
    """The JSON object in ``stack.json`` at ``path``.

    Raises:
        StackMissingError: the file does not exist (``hint`` says what to do).
        StackFileError: it is not readable JSON or not an object.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StackMissingError(
            f"real DirectML is not set up on this machine: {path} does not exist; {hint}",
            value=str(path),
            path=str(path),
        ) from None
    except (OSError, ValueError) as exc:
        raise StackFileError(
            f"stack.json is not readable JSON: {exc}", value=str(path), path=str(path)
        ) from exc
    if not isinstance(doc, dict):
        raise StackFileError("stack.json is not a JSON object", value=str(path), path=str(path))
    return doc


def windows_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a Windows program names it: drive Z: (the Linux root in every Wine prefix) under Wine,
    itself on Windows."""
    if sys.platform == "win32":
        return str(path)
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


def wine_env(stack_env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Windows process of the stack: ``base`` (os.environ by default) plus the
    stack's variables (WINEPREFIX, VK_ICD_FILENAMES, WINEDEBUG, WINEDLLOVERRIDES, ...)."""
    env = dict(os.environ if base is None else base)
    env.update(stack_env)
    return env


class _Display:
    """One Xvfb for this process, started on first need and stopped at exit, or by its watcher when the
    process ends otherwise (SIGTERM, SIGKILL: see :func:`_watch`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.watcher: subprocess.Popen[bytes] | None = None
        self.guard = -1  # the write end of the watcher's pipe
        self.display = ""

    def get(self) -> str:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return self.display
            _stop_proc(self)  # its watcher too
            self.display = _start_xvfb(self)
            return self.display

    def stop(self) -> None:
        with self.lock:
            _stop_proc(self)
            self.display = ""


_DISPLAY = _Display()


def _forget_in_child() -> None:
    """A forked child starts its own Xvfb when it needs one (the parent's is not its child to wait for):
    it drops the parent's, and its copy of the watcher's pipe, so the parent's end alone stops that Xvfb."""
    global _DISPLAY
    if _DISPLAY.guard >= 0:
        with contextlib.suppress(OSError):
            os.close(_DISPLAY.guard)
    _PARENTS.append(_DISPLAY)  # kept: a Popen collected with its status unknown warns "still running"
    _DISPLAY = _Display()


_PARENTS: list[_Display] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _start_xvfb(holder: _Display) -> str:
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        raise EngineUnavailableError(
            "no DISPLAY and no Xvfb: install Debian's xvfb package (`dmlshim directml setup` does)",
            value="Xvfb",
        )
    # -displayfd: Xvfb takes the first free display number itself (atomically, by its lock file) and
    # writes it to the pipe once it accepts connections; no number is guessed, so two starts never race.
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [xvfb, "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_fd,),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise EngineUnavailableError(f"cannot start Xvfb: {exc}", value=xvfb) from exc
    os.close(write_fd)
    holder.proc = proc
    _watch(holder, proc.pid)
    text = b""
    deadline = time.monotonic() + XVFB_START_TIMEOUT
    try:
        while not text.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([read_fd], [], [], max(0.0, left))
            chunk = os.read(read_fd, 64) if ready else b""
            if not chunk:
                break
            text += chunk
    finally:
        os.close(read_fd)
    number = text.strip().decode("ascii", errors="replace")
    if not number.isdigit() or proc.poll() is not None:
        _stop_proc(holder)
        raise EngineUnavailableError(
            f"Xvfb did not start within {XVFB_START_TIMEOUT:.0f} s (it said {number!r})", value="Xvfb"
        )
    logger.info("started Xvfb on :%s", number)
    return f":{number}"


def _watch(holder: _Display, pid: int) -> None:
    """Start a watcher that stops Xvfb ``pid`` once this process is gone, however it ended.

    SIGTERM and SIGKILL run no atexit hook, and a Python SIGTERM handler would run only when the main
    thread runs Python again: the kernel may hand the signal to any other thread (onnxruntime's, OpenBLAS's)
    while the main thread sleeps in a lock, and the process would then not end at all. So SIGTERM keeps its
    default action, and a shell in its own session reads a pipe whose write end only this process (and
    children forked from it) hold: when the last holder is gone, ``read`` ends and the shell stops Xvfb.
    """
    read_fd, write_fd = os.pipe()
    try:
        holder.watcher = subprocess.Popen(
            ["sh", "-c", 'read _; kill -TERM "$1" 2>/dev/null', "dmlshim-xvfb-watch", str(pid)],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        os.close(write_fd)
        logger.warning("no watcher for Xvfb (%s): a SIGTERM or SIGKILL would leave it running", exc)
        return
    finally:
        os.close(read_fd)
    holder.guard = write_fd


def _stop_proc(holder: _Display) -> None:
    proc, holder.proc = holder.proc, None
    watcher, holder.watcher = holder.watcher, None
    guard, holder.guard = holder.guard, -1
    if proc is not None and proc.poll() is None:
        proc.terminate()
    # The watcher's kill must reach only Xvfb: while Xvfb is this process's child not yet reaped, its pid
    # is no other process's (closing the pipe ends the watcher, waited for before Xvfb); once reaped, the
    # watcher is killed first.
    if watcher is not None and (proc is None or proc.returncode is not None):
        watcher.kill()
    if guard >= 0:
        os.close(guard)
    if watcher is not None:
        try:
            watcher.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    if proc is not None and proc.poll() is None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shared_display() -> str:
    """A ``DISPLAY`` for Wine's DXGI (which wants one even for a compute-only device): this process's
    Xvfb, started on first use and stopped at exit.

    Raises:
        EngineUnavailableError: Xvfb is not installed or did not start.
    """
    return _DISPLAY.get()


def stop_display() -> None:
    """Stop this process's Xvfb, if one runs (a later :func:`shared_display` starts another)."""
    _DISPLAY.stop()


atexit.register(stop_display)
