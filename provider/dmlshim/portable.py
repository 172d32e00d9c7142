"""Every platform-dependent call dmlshim makes, each with its Windows path.

Python documents which ``os`` functions accept ``follow_symlinks``, a file descriptor or ``dir_fd``
(``os.supports_follow_symlinks``, ``os.supports_fd``, ``os.supports_dir_fd``) and which names exist only on
POSIX (``os.fchmod`` before 3.13, ``os.sched_getaffinity``, ``signal.pthread_sigmask``, ``signal.SIGHUP``,
``os.O_DIRECTORY``, ``os.O_NONBLOCK``). The rest of the package asks this module instead of calling them
directly, so a Windows break shows up on Linux too: tests/test_windows_capabilities.py runs the writers,
readers and ``validate --jobs`` with those capabilities taken away as on Windows (docs/windows.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

__all__ = [
    "READ_FLAGS",
    "REWRITE_FLAGS",
    "WINDOWS_RESERVED_NAMES",
    "Terminated",
    "cleanup_on_termination",
    "folder_locks",
    "fsync_dir",
    "hold_signals",
    "is_link",
    "is_windows",
    "link_new",
    "lock_folder",
    "owned_by_me",
    "physical_memory",
    "process_context",
    "read_flags",
    "replace",
    "reserved_device_name",
    "set_mode",
    "termination_signals",
    "usable_cores",
    "user_cache_dir",
]

WINDOWS_RESERVED_NAMES = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"]
    + [f"{stem}{n}" for stem in ("COM", "LPT") for n in (*"123456789", "¹", "²", "³")]
)
"""Names Windows maps to devices in every folder, with any extension (``NUL.npy`` is the null device)."""

# Name-surrogate reparse points (symbolic links, junctions, ...) lead elsewhere: Windows' own test for them.
_REPARSE_NAME_SURROGATE = 0x20000000

# Windows reports a file another process holds open as a sharing violation (or access denied) on
# replace; such holders (virus scanners, indexers, an editor) usually let go within a second.
_REPLACE_RETRIES = 20
_REPLACE_WAIT_S = 0.05


def is_windows() -> bool:
    """True on Windows. Callers ask this function (never ``os.name``) so tests can simulate Windows."""
    return os.name == "nt"


def folds_case() -> bool:
    """True where names that differ only in case name one file by default (Windows, macOS)."""
    return is_windows() or sys.platform == "darwin"


def name_key(path: str) -> str:
    """``path`` as the file system compares names: case-folded where :func:`folds_case`."""
    return path.casefold() if folds_case() else path


READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
"""Flags for ``os.open`` of a file to read: binary on Windows (no newline or Ctrl-Z translation)."""


REWRITE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
"""Flags for ``os.open`` of a file a process rewrites in place: never through a final link (where POSIX
can tell), binary on Windows."""


def read_flags(*, follow_links: bool = True) -> int:
    """:data:`READ_FLAGS`, plus non-blocking where POSIX has it (a FIFO must not block the open); without
    ``follow_links``, never through a final link (where POSIX can tell)."""
    return READ_FLAGS | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))


def reserved_device_name(name: str) -> bool:
    """True when a file name means a device on Windows (``NUL``, ``con.txt``, ``COM1.npy``...)."""
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    return stem in WINDOWS_RESERVED_NAMES


def is_link(st: os.stat_result) -> bool:
    """True for a symbolic link, and on Windows for any reparse point that names another place
    (junctions and mount points too, which ``stat.S_ISLNK`` does not report)."""
    if stat.S_ISLNK(st.st_mode):
        return True
    return bool(getattr(st, "st_reparse_tag", 0) & _REPARSE_NAME_SURROGATE)


def link_new(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Give ``source`` (a regular file dmlshim just wrote) the new name ``target``, failing with
    ``FileExistsError`` when ``target`` exists: the no-overwrite step of the careful writer.

    ``follow_symlinks=False`` is passed only where ``os.link`` accepts it (not on Windows, where it would
    raise NotImplementedError); ``source`` is never a link, so the result is the same.
    """
    if os.link in os.supports_follow_symlinks:
        os.link(source, target, follow_symlinks=False)
    else:
        os.link(source, target)


def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """``os.replace``, waiting briefly on Windows while another process holds ``target`` open.

    Raises:
        OSError: the target stays in use (the caller names the file), or any other failure.
    """
    for attempt in range(_REPLACE_RETRIES):
        try:
            os.replace(source, target)
            return
        except PermissionError as exc:
            in_use = getattr(exc, "winerror", None) in (5, 32) or exc.errno == errno.EACCES
            if not (is_windows() and in_use) or attempt == _REPLACE_RETRIES - 1:
                raise
            time.sleep(_REPLACE_WAIT_S)


def set_mode(fd: int, path: str | os.PathLike[str], mode: int) -> None:
    """Set a new file's permission bits (by descriptor where the platform allows, else by name).

    On Windows only the read-only bit exists and a new file is writable already: nothing to do.
    """
    if is_windows():
        return
    if os.chmod in os.supports_fd:
        os.chmod(fd, mode)
    else:
        os.chmod(path, mode)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the platform has one)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        with contextlib.suppress(OSError):
            return max(1, len(getaffinity(0)))
    return os.cpu_count() or 1


def user_cache_dir() -> str:
    """dmlshim's folder in the user's cache directory (not created here): ``DMLSHIM_CACHE_DIR`` when set,
    else ``%LOCALAPPDATA%\\dmlshim\\Cache`` on Windows, ``~/Library/Caches/dmlshim`` on macOS and
    ``$XDG_CACHE_HOME/dmlshim`` (``~/.cache/dmlshim``) elsewhere."""
    override = os.environ.get("DMLSHIM_CACHE_DIR", "")
    if override:
        return os.path.abspath(os.path.expanduser(override))
    home = os.path.expanduser("~")
    if is_windows():
        local = os.environ.get("LOCALAPPDATA", "") or os.path.join(home, "AppData", "Local")
        return os.path.join(local, "dmlshim", "Cache")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "dmlshim")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG base directory spec ignores a relative XDG_CACHE_HOME.
    base = xdg if os.path.isabs(xdg) else os.path.join(home, ".cache")
    return os.path.join(base, "dmlshim")


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (None when the platform does not say).

    POSIX answers through ``os.sysconf``; Windows has no ``sysconf`` and answers through
    ``GlobalMemoryStatusEx``.
    """
    sysconf = getattr(os, "sysconf", None)
    if sysconf is not None:
        with contextlib.suppress(ValueError, OSError):
            return int(sysconf("SC_PAGE_SIZE")) * int(sysconf("SC_PHYS_PAGES"))
    if not is_windows():
        return None
    try:
        import ctypes

        class _MemoryStatusEx(ctypes.Structure):
            _fields_ = [
                ("dwLength", ctypes.c_ulong),
                ("dwMemoryLoad", ctypes.c_ulong),
                ("ullTotalPhys", ctypes.c_ulonglong),
                ("ullAvailPhys", ctypes.c_ulonglong),
                ("ullTotalPageFile", ctypes.c_ulonglong),
                ("ullAvailPageFile", ctypes.c_ulonglong),
                ("ullTotalVirtual", ctypes.c_ulonglong),
                ("ullAvailVirtual", ctypes.c_ulonglong),
                ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
            ]

        status = _MemoryStatusEx()
        status.dwLength = ctypes.sizeof(status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
            return int(status.ullTotalPhys)
    except (AttributeError, OSError, ImportError):
        pass
    return None


def clock_ticks_per_second() -> int:
    """The unit of the CPU times ``/proc/<pid>/stat`` gives (``SC_CLK_TCK``); 100 where the platform
    does not say (Windows has no ``sysconf`` and no ``/proc``)."""
    sysconf = getattr(os, "sysconf", None)
    if sysconf is not None:
        with contextlib.suppress(ValueError, OSError):
            return int(sysconf("SC_CLK_TCK")) or 100
    return 100


def termination_signals() -> tuple[signal.Signals, ...]:
    """The signals that ask dmlshim to stop: SIGINT and SIGTERM everywhere, SIGHUP on POSIX, SIGBREAK
    (Ctrl-Break) on Windows."""
    names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")
    return tuple(getattr(signal, n) for n in names if hasattr(signal, n))


@contextlib.contextmanager
def hold_signals() -> Iterator[None]:
    """Hold termination signals back while a few renames run, so they happen all or none.

    POSIX blocks them (``pthread_sigmask``) and delivers them afterwards. Windows has no signal mask:
    Python handlers are swapped for ones that note the signal, and the first noted one is raised again
    at the end, so Ctrl-C / Ctrl-Break still stop the program, just after the renames.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = termination_signals()
    sigmask = getattr(signal, "pthread_sigmask", None)
    if sigmask is not None:
        old = sigmask(signal.SIG_BLOCK, set(held))
        try:
            yield
        finally:
            sigmask(signal.SIG_SETMASK, old)
        return
    noted: list[int] = []
    previous: dict[int, Any] = {}

    def note(signum: int, _frame: Any) -> None:
        noted.append(signum)

    for sig in held:
        with contextlib.suppress(OSError, ValueError):
            previous[sig] = signal.signal(sig, note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            signal.raise_signal(noted[0])


class Terminated(BaseException):
    """SIGTERM (SIGHUP, SIGBREAK) arrived inside :func:`cleanup_on_termination`: raised so that the
    ``finally`` blocks removing temporary files run; the signal is delivered again afterwards."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _default_in_child() -> None:
    """In a child forked inside :func:`cleanup_on_termination`, the termination signals do what they did
    before it (the child never leaves the parent's block: a worker a pool ends with SIGTERM would raise
    :class:`Terminated` instead of ending, and a handler of its own would see this one as the program's)."""
    for sig in termination_signals():
        with contextlib.suppress(OSError, ValueError, TypeError):
            if getattr(signal.getsignal(sig), "dmlshim_termination", False):
                signal.signal(sig, signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_in_child)


@contextlib.contextmanager
def cleanup_on_termination() -> Iterator[None]:
    """Let the ``finally`` blocks inside run when SIGTERM, SIGHUP or SIGBREAK ends the process.

    Those signals end a process without unwinding its stack: a temporary file beside an output (or an
    export's staging folder) would stay in the user's folder. Inside this block, in the main thread, each
    such signal still at its default action raises :class:`Terminated` instead; when the block is left,
    the handlers are put back and the signal is delivered again, so the process ends as it would have
    (exit status 128 + signal). A handler the program installed, SIG_IGN, other threads and nested blocks
    are left alone (the outermost block answers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours: list[int] = []
    noted: list[int] = []

    def terminated(signum: int, _frame: Any) -> None:
        noted.append(signum)
        raise Terminated(signum)

    terminated.dmlshim_termination = True  # type: ignore[attr-defined]  # see _default_in_child

    for sig in termination_signals():
        if sig == signal.SIGINT:
            continue  # Python's own handler already raises KeyboardInterrupt
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, terminated)
                ours.append(sig)
    try:
        yield
    finally:
        for sig in ours:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)
        if noted:
            # the cleanup ran; end as the signal would have (also when something swallowed Terminated)
            with contextlib.suppress(Exception):
                if sys.stdout is not None:
                    sys.stdout.flush()
            signal.raise_signal(noted[0])


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT held back in the main thread while it starts worker processes, which inherit the mask (POSIX;
    a no-op where there is no signal mask, Windows, and in other threads)."""
    sigmask = getattr(signal, "pthread_sigmask", None)
    if sigmask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        sigmask(signal.SIG_SETMASK, previous)


def unblock_sigint() -> None:
    """Lift an inherited block of SIGINT (see :func:`sigint_blocked`; nothing to do without a signal mask)."""
    sigmask = getattr(signal, "pthread_sigmask", None)
    if sigmask is not None:
        sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def is_root() -> bool:
    """Whether this process runs as root (POSIX); False on Windows, which has no such user id."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


def lock_folder(folder: str, *, follow_links: bool = True) -> int | None:
    """An open descriptor of ``folder`` holding an exclusive advisory lock, released when it (and every
    copy a fork made) is closed; None when another process holds it, the folder cannot be opened (a link,
    with ``follow_links=False``), or the platform has no such locks (Windows)."""
    try:
        import fcntl
    except ImportError:
        return None
    flags = os.O_RDONLY | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(folder, flags)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def folder_locks() -> bool:
    """Whether :func:`lock_folder` can lock at all (not on Windows)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


def owned_by_me(info: os.stat_result) -> bool:
    """Whether a file's stat says this process's user owns it (always, where there are no user ids)."""
    getuid = getattr(os, "getuid", None)
    return getuid is None or info.st_uid == getuid()


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename just made) to disk where the platform can.

    POSIX opens the folder and ``fsync``s it; Windows cannot open a folder this way and commits
    renames through the file system's own journal, so there is nothing to do.
    """
    if is_windows():
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def process_context() -> BaseContext:
    """The start method for worker processes: ``spawn`` on every platform.

    Windows only has ``spawn``; using it everywhere means Linux CI runs the same code path (workers
    import dmlshim afresh and receive only picklable arguments), and no worker inherits onnxruntime's
    threads through ``fork``.
    """
    import multiprocessing  # here: only process pools need it, and it costs ~25 ms of imports

    return multiprocessing.get_context("spawn")
