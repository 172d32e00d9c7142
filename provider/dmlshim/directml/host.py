"""The Windows host process: ``node.exe`` under Wine running ``host.js`` with onnxruntime-node's DirectML
provider, spoken to over a loopback socket.

One host serves every session of this Python process (starting one costs seconds: Wine, node,
onnxruntime.dll, the D3D12 device); it is stopped at exit. When there is no ``DISPLAY`` it runs on the
process's one Xvfb (:func:`dmlshim.directml.wine.shared_display`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EngineUnavailableError
from ..fileio import stale_folders
from .progress import ProgressWait, WaitExpired, ceiling_override, check_settings, stall_window
from .stack import Stack, load_stack
from .wine import shared_display, windows_path

logger = logging.getLogger(__name__)

HOST_SCRIPT = Path(__file__).with_name("host.js")
START_TIMEOUT = 600.0
LOG_PREFIX = "dmlshim-dmlhost-"
LOCKED_LOG_PREFIX = LOG_PREFIX + "locked-"
"""The log folders this version makes: each is locked while its host's Python process (or a child forked
from it) lives, so that one a killed process left behind is removed by the next host
(:mod:`dmlshim.fileio.stale_folders`; kept logs are not, and folders of earlier versions, unlocked, never)."""
KEPT_MARK = "kept"
"""A file in a host's log folder kept because an error named its log (see :meth:`Host.close`)."""
KEPT_LOGS = 10
"""How many kept log folders (of failed runs) stay in the temporary directory; older ones are removed."""
"""The ceiling of the wait for node.exe to connect back (a cold Wine prefix takes ~10 s; a host that
exits or stops gaining CPU fails sooner, :mod:`dmlshim.directml.progress`), unless
``DMLSHIM_DIRECTML_TIMEOUT`` sets it."""

DTYPES: dict[str, str] = {
    "float32": "float32", "float64": "float64", "int8": "int8", "uint8": "uint8", "int16": "int16",
    "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "bool": "bool", "float16": "float16",
}  # fmt: skip
"""numpy dtype name -> onnxruntime-node tensor type (the types its binding takes)."""


def _strings(name: str, arr: np.ndarray) -> list[str]:
    """The elements of a ``tensor(string)`` feed as onnxruntime's Python binding reads an object or
    unicode array: each by ``str`` (a ``bytes`` element becomes ``"b'x'"``, as there); a unicode array's
    element up to its first NUL, as there.

    Raises:
        HostError: an element holds a NUL character: onnxruntime-node cuts a string there, so the run
            would go on with another string.
    """
    strings = [str(x) for x in arr.reshape(-1).tolist()]
    if arr.dtype.kind == "U":  # onnxruntime reads a numpy text element up to its first NUL
        return [text.split("\x00", 1)[0] for text in strings]
    for position, text in enumerate(strings):
        if "\x00" in text:
            raise HostError(
                f"input {name!r}: element {position} holds a NUL character, which onnxruntime-node (the "
                "DirectML host on Linux) cuts the string at; onnxruntime keeps it",
                "run",
            )
    return strings


class HostError(RuntimeError):
    """The host answered a request with an error (onnxruntime's message), or died."""

    def __init__(self, message: str, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class HostSession:
    """A session the host holds."""

    id: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    placements: dict[str, str] | None = None
    """node name -> execution provider, from onnxruntime's verbose log (None when it logged none)."""
    model_bytes: int = 0
    """The model file's size: a run's wait ceiling grows with it."""


_LOG_MESSAGE = re.compile(r"^.*?\[[VIWEF]:onnxruntime:[^\]]*\] ?(.*)$")
_PLACED = re.compile(r"^\s*(All nodes placed on|Node\(s\) placed on) \[(\w+)\]")
_PLACED_NODE = re.compile(r"^\s{2,}(\S+) \((.*)\)\s*$")


def parse_placements(log: str) -> dict[str, str] | None:
    """onnxruntime's "Node placements" verbose log (session creation) as node name -> provider. When it
    says ``All nodes placed on [X]`` without listing them, ``"*"`` maps to X. None when it logged none."""
    placements: dict[str, str] = {}
    provider: str | None = None
    seen = False
    for line in log.splitlines():
        message = _LOG_MESSAGE.match(line)
        if message is None:
            provider = None
            continue
        text = message.group(1)
        found = _PLACED.match(text)
        if found:
            provider, seen = found.group(2), True
            if found.group(1).startswith("All"):
                placements["*"] = provider
            continue
        node = _PLACED_NODE.match(text)
        if provider is not None and node:
            placements[node.group(2)] = provider
        else:
            provider = None
    return placements if seen else None


class Host:
    """A running ``node.exe host.js`` under Wine."""

    _owner: int | None = None
    """The thread inside a request (holding the lock), if any."""
    _pending_releases: tuple[int, ...] = ()
    """Sessions :meth:`release` could not free while their thread was inside a request."""

    def __init__(self, stack: Stack) -> None:
        check_settings()  # a bad wait setting fails here, not with node.exe already running
        self.stack = stack
        self._lock = threading.Lock()
        folder, self._log_lock = stale_folders.make_held_folder(
            LOCKED_LOG_PREFIX, kept=_kept_log, what="DirectML host log folders"
        )
        self._log_dir = Path(folder)
        self.log_path = self._log_dir / "host.log"
        env = stack.run_env()
        env["NODE_PATH"] = windows_path(stack.node_modules)
        if not env.get("DISPLAY"):
            env["DISPLAY"] = shared_display()
        self.info: dict[str, Any] = {}
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            server.settimeout(1.0)
            port = server.getsockname()[1]
            with open(self.log_path, "wb") as log:
                # node.exe under Wine fails with EBADF when its stdout is a pipe: a file it is.
                self._proc = subprocess.Popen(
                    [stack.wine, str(stack.node_exe), windows_path(HOST_SCRIPT), str(port)],
                    cwd=stack.bin_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                self._sock = self._accept(server)
            except (OSError, HostError) as exc:
                self.close(keep_log=True)  # the error names the log
                detail = str(exc) if isinstance(exc, HostError) else f"{exc}; its log: {self._log_tail()}"
                raise EngineUnavailableError(
                    f"the DirectML host (node.exe under Wine) did not start: {detail}",
                    value=str(self.log_path),
                ) from exc
        self._sock.settimeout(1.0)
        try:
            self.info = self.request({"op": "info"})[0]
        except BaseException:
            self.close()  # never returned: nothing else would stop node.exe (its log's tail is in the error)
            raise

    def _log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            return " | ".join(text[-lines:]) or "(empty)"
        return "(none)"

    def _accept(self, server: socket.socket) -> socket.socket:
        """Wait for node.exe to connect back, while it runs and makes progress (``server`` times out
        every second)."""
        wait = ProgressWait(
            "its start (connecting back)",
            self._proc.pid,
            ceiling_override() or START_TIMEOUT,
            stall_window(),
        )
        while True:
            try:
                sock, _ = server.accept()
                return sock
            except TimeoutError:
                self._waited(wait)

    def _waited(self, wait: ProgressWait) -> None:
        """After a socket wait timed out: raise if the host is gone, stalled or past the ceiling."""
        # node.exe may have crashed without closing the socket (Wine keeps it for a debugger).
        if self._proc.poll() is not None:
            raise HostError(f"the DirectML host exited; its log: {self._log_tail()}", "host")
        try:
            wait.check()
        except WaitExpired as exc:
            raise HostError(f"{exc}; its log: {self._log_tail()}", "host") from None

    def _send_all(self, data: bytes, wait: ProgressWait) -> None:
        """Send ``data`` whole while the host makes progress. ``sendall`` would hold the socket's 1 s
        timeout for the whole transfer: megabytes of feeds to a host busy under Wine take longer."""
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view[: 1 << 20])
            except TimeoutError:
                self._waited(wait)
                continue
            view = view[sent:]

    def _recv_exact(self, size: int, wait: ProgressWait) -> bytes:
        chunks = []
        while size:
            try:
                chunk = self._sock.recv(min(size, 1 << 20))
            except TimeoutError:
                self._waited(wait)
                continue
            if not chunk:
                raise HostError(f"the DirectML host exited; its log: {self._log_tail()}", "host")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def request(
        self, header: dict[str, Any], body: bytes = b"", *, work_bytes: int = 0
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request and wait for its reply, as long as the host makes progress
        (:mod:`dmlshim.directml.progress`; ``work_bytes`` of model beside ``body`` raise the ceiling).

        Raises:
            HostError: the host replied with an error, went away, stalled or passed the ceiling.
        """
        with self._lock:
            self._owner = threading.get_ident()
            try:
                for session in self._deferred_releases():
                    with contextlib.suppress(HostError, OSError):
                        self._exchange({"op": "release", "session": session}, b"", 0)
                return self._exchange(header, body, work_bytes)
            finally:
                self._owner = None

    def _deferred_releases(self) -> tuple[int, ...]:
        """The sessions :meth:`release` could not free while this thread was inside a request."""
        pending, self._pending_releases = self._pending_releases, ()
        return pending

    def _exchange(self, header: dict[str, Any], body: bytes, work_bytes: int) -> tuple[dict[str, Any], bytes]:
        """One request and its reply; the caller holds the lock."""
        head = json.dumps(header).encode("utf-8")
        wait = ProgressWait.for_request(
            f"the {header.get('op')!r} request", getattr(self._proc, "pid", None), len(body) + work_bytes
        )
        try:
            self._send_all(struct.pack("<I", len(head)) + head + struct.pack("<Q", len(body)) + body, wait)
            (hlen,) = struct.unpack("<I", self._recv_exact(4, wait))
            reply = json.loads(self._recv_exact(hlen, wait).decode("utf-8"))
            (blen,) = struct.unpack("<Q", self._recv_exact(8, wait))
            data = self._recv_exact(blen, wait)
        except OSError as exc:
            raise HostError(f"lost the DirectML host: {exc}; its log: {self._log_tail()}", "host") from exc
        if not reply.get("ok"):
            raise HostError(str(reply.get("error")), str(reply.get("stage")))
        return reply, data

    def load(
        self, model_path: Path, *, disable_cpu_fallback: bool = False, optimization: str = "all"
    ) -> HostSession:
        """Create an onnxruntime session with the DirectML provider on ``model_path``.

        The session logs verbosely while it is created, so that onnxruntime's node placement can be read
        from the host's log (:attr:`HostSession.placements`)."""
        with self._lock:
            start = self.log_path.stat().st_size if self.log_path.exists() else 0
        model_bytes = model_path.stat().st_size if model_path.is_file() else 0
        try:
            reply, _ = self.request(
                {
                    "op": "load",
                    "path": windows_path(model_path),
                    "disableCpuFallback": disable_cpu_fallback,
                    "optimization": optimization,
                    "logSeverity": 0,
                },
                work_bytes=model_bytes,
            )
        finally:
            log = self._read_log(start)
        return HostSession(
            int(reply["session"]),
            tuple(reply["inputs"]),
            tuple(reply["outputs"]),
            parse_placements(log),
            model_bytes,
        )

    def _read_log(self, start: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def run(self, session: HostSession, feeds: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
        """Run ``session`` on ``feeds``; returns the named outputs."""
        specs = []
        parts = []
        for name, value in feeds.items():
            arr = np.ascontiguousarray(value)
            if arr.dtype.kind in "OU":  # tensor(string): the strings travel in the header, as JSON
                strings = _strings(name, arr)
                specs.append({"name": name, "type": "string", "dims": list(arr.shape), "nbytes": 0})
                specs[-1]["strings"] = strings
                continue
            kind = DTYPES.get(arr.dtype.name)
            if kind is None:
                raise HostError(
                    f"input {name!r}: element type {arr.dtype} cannot be passed to onnxruntime-node", "run"
                )
            data = arr.tobytes()
            specs.append({"name": name, "type": kind, "dims": list(arr.shape), "nbytes": len(data)})
            parts.append(data)
        reply, body = self.request(
            {"op": "run", "session": session.id, "feeds": specs, "outputs": outputs},
            b"".join(parts),
            work_bytes=session.model_bytes,
        )
        results = []
        offset = 0
        for spec in reply["outputs"]:
            if spec["type"] == "string":
                strings = np.empty(len(spec["strings"]), dtype=object)
                strings[:] = spec["strings"]
                results.append(strings.reshape(spec["dims"]))
                continue
            dtype = np.dtype("bool" if spec["type"] == "bool" else spec["type"])
            chunk = body[offset : offset + spec["nbytes"]]
            offset += spec["nbytes"]
            results.append(np.frombuffer(chunk, dtype=dtype).reshape(spec["dims"]).copy())
        return results

    def release(self, session: HostSession) -> None:
        """Free a session in the host (errors ignored: the host may be gone).

        Called from a garbage-collected engine's ``__del__`` while this thread is inside a request (the
        lock is not reentrant, and a request's frames must not interleave), the release is sent before
        the next request instead."""
        if self._owner == threading.get_ident():
            self._pending_releases = (*self._pending_releases, session.id)
            return
        with contextlib.suppress(HostError, OSError):
            self.request({"op": "release", "session": session.id})

    def alive(self) -> bool:
        """Whether node.exe is still running."""
        return self._proc.poll() is None

    def close(self, *, keep_log: bool = False) -> None:
        """Stop node.exe (closing the socket ends it); the shared Xvfb stops at exit.

        The host's log folder is removed, unless ``keep_log`` (an error names the log): then it stays,
        marked, and only the newest :data:`KEPT_LOGS` such folders are kept."""
        with contextlib.suppress(OSError, AttributeError):
            self._sock.close()
        proc = getattr(self, "_proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_dir = getattr(self, "_log_dir", None)
        lock, self._log_lock = getattr(self, "_log_lock", None), None
        if log_dir is None or not log_dir.is_dir():
            stale_folders.release(None, lock)
            return
        if keep_log:
            with contextlib.suppress(OSError):
                (log_dir / KEPT_MARK).touch()
            stale_folders.release(None, lock)
            prune_kept_logs(log_dir.parent)
        else:
            stale_folders.release(str(log_dir), lock)
            logger.debug("removed the DirectML host's log folder %s", log_dir)


def _kept_log(folder: str) -> bool:
    """Whether a host's log folder was kept because an error names its log (pruned apart)."""
    return os.path.exists(os.path.join(folder, KEPT_MARK))


def prune_kept_logs(folder: Path, keep: int = KEPT_LOGS) -> None:
    """Remove from ``folder`` all but the newest ``keep`` host log folders kept for failed runs."""
    kept: list[tuple[float, Path]] = []
    with contextlib.suppress(OSError):
        for entry in folder.glob(f"{LOG_PREFIX}*"):
            with contextlib.suppress(OSError):
                kept.append(((entry / KEPT_MARK).stat().st_mtime, entry))
    for _, old in sorted(kept, reverse=True)[keep:]:
        shutil.rmtree(old, ignore_errors=True)


_HOSTS: dict[str, Host] = {}
_HOSTS_LOCK = threading.Lock()


def shared_host(stack: Stack | None = None) -> Host:
    """The host of this process for ``stack`` (the set-up one by default), started on first use."""
    stack = stack or load_stack()
    key = str(stack.folder)
    with _HOSTS_LOCK:
        host = _HOSTS.get(key)
        if host is None or not host.alive():
            if host is not None:
                host.close()
            host = Host(stack)
            _HOSTS[key] = host
        return host


@atexit.register
def _close_hosts() -> None:
    with _HOSTS_LOCK:
        for host in _HOSTS.values():
            host.close()
        _HOSTS.clear()
