"""How long to wait for the DirectML host: as long as it keeps working, not a fixed clock.

A model's run on lavapipe (DirectML's D3D12 on a CPU Vulkan driver) takes seconds to most of an hour
depending on the model and on how loaded the machine is, so no fixed timeout fits every model and
machine. What the host does is visible instead: node.exe (Wine keeps the Popen child's pid for it, and
lavapipe's threads run inside it) uses CPU while it works and none while it waits. A wait goes on while
the host's process tree gains CPU time; it fails when the tree gained less than
:data:`STALL_MIN_CPU` seconds within the stall window, or when the overall ceiling has passed (which
grows with the bytes of the model and feeds the request carries).

Settings (environment, seconds):

- ``DMLSHIM_DIRECTML_TIMEOUT``: the overall ceiling of one request (default: scaled with its bytes,
  :func:`default_ceiling`).
- ``DMLSHIM_DIRECTML_STALL``: the stall window (default :data:`STALL_WINDOW`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DmlShimError
from ..portable import clock_ticks_per_second

logger = logging.getLogger(__name__)

TIMEOUT_ENV = "DMLSHIM_DIRECTML_TIMEOUT"
STALL_ENV = "DMLSHIM_DIRECTML_STALL"
STALL_WINDOW = 240.0
"""Seconds a host may go without gaining CPU time before a wait fails (idle node.exe gains none)."""
STALL_MIN_CPU = 0.5
"""CPU seconds the host's process tree must gain within a stall window to count as working."""
CEILING_BASE = 1800.0
CEILING_PER_MB = 60.0
"""The default ceiling: :data:`CEILING_BASE` plus this many seconds per MB the request carries (the
237 MB Keypoint R-CNN gets ~4.5 h; its first run needed more than 600 s on a loaded 2-core machine)."""

_PROC = Path("/proc")


class WaitExpired(Exception):
    """A wait ended without an answer; the message says what was waited for, how long, the host's CPU
    seconds and the setting to change. :class:`~dmlshim.directml.host.Host` turns it into a HostError."""


def _env_seconds(name: str) -> float | None:
    """The seconds setting ``name`` holds, None when unset; anything but a finite positive number is
    refused (nan or inf would make a hung host's wait endless)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise DmlShimError(
            f"{name}={raw!r} is not a number of seconds", rule="a finite positive number", value=raw
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise DmlShimError(
            f"{name}={raw!r} must be a finite positive number of seconds",
            rule="a finite positive number",
            value=raw,
        )
    return value


def check_settings() -> None:
    """Refuse an unusable wait setting now, before a host is started (see :func:`_env_seconds`)."""
    stall_window()
    ceiling_override()


def stall_window() -> float:
    """The stall window: ``DMLSHIM_DIRECTML_STALL`` or :data:`STALL_WINDOW`."""
    return _env_seconds(STALL_ENV) or STALL_WINDOW


def ceiling_override() -> float | None:
    """The overall ceiling ``DMLSHIM_DIRECTML_TIMEOUT`` sets, if it does."""
    return _env_seconds(TIMEOUT_ENV)


def default_ceiling(nbytes: int) -> float:
    """The overall ceiling of a request carrying ``nbytes`` of model and feeds, unless
    ``DMLSHIM_DIRECTML_TIMEOUT`` sets it."""
    return CEILING_BASE + CEILING_PER_MB * nbytes / 1e6


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields start after the last ")"
    return text.rsplit(")", 1)[1].split()


def tree_cpu_seconds(root: int) -> float | None:
    """User + system CPU seconds of process ``root``, its reaped children and its live descendants
    (from /proc); None when /proc does not show ``root``."""
    fields = _stat_fields(root)
    if fields is None:
        return None
    tick = clock_ticks_per_second()
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {root: fields}
    try:
        entries = [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]
    except OSError:
        entries = []
    for pid in entries:
        if pid == root:
            continue
        f = _stat_fields(pid)
        if f is not None:
            stats[pid] = f
            children.setdefault(int(f[1]), []).append(pid)
    total = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        f = stats[pid]
        # after ")": state, ppid, ... utime (12th), stime, cutime, cstime
        total += sum(int(x) for x in f[11:15])
        todo.extend(children.get(pid, ()))
    return total / tick


@dataclass
class ProgressWait:
    """One wait for the host: call :meth:`check` whenever a socket wait timed out.

    Args:
        what: what is waited for, for the message ("the reply to run").
        pid: the host's process id (None: no CPU to follow, only the ceiling holds).
        ceiling: overall seconds.
        stall: the stall window (seconds).
    """

    what: str
    pid: int | None
    ceiling: float
    stall: float
    ceiling_setting: str = TIMEOUT_ENV

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.cpu0 = self._cpu()
        self.mark_time = self.started
        self.mark_cpu = self.cpu0

    @classmethod
    def for_request(cls, what: str, pid: int | None, nbytes: int) -> ProgressWait:
        """A request's wait with the configured (or default, scaled to ``nbytes``) settings."""
        return cls(what, pid, ceiling_override() or default_ceiling(nbytes), stall_window())

    def _cpu(self) -> float | None:
        return tree_cpu_seconds(self.pid) if self.pid is not None else None

    def check(self) -> None:
        """Raise :class:`WaitExpired` if the host stalled or the ceiling passed."""
        now = time.monotonic()
        cpu = self._cpu()
        if cpu is not None and self.mark_cpu is not None and cpu - self.mark_cpu >= STALL_MIN_CPU:
            self.mark_time, self.mark_cpu = now, cpu
        elapsed = now - self.started
        used = self._used(cpu)
        if now - self.mark_time > self.stall and cpu is not None:
            raise WaitExpired(
                f"the DirectML host made no progress on {self.what} for {now - self.mark_time:.0f} s "
                f"(its processes gained under {STALL_MIN_CPU} s of CPU; {used} in {elapsed:.0f} s "
                f"waited): it looks hung; raise {STALL_ENV} (now {self.stall:.0f} s) if it is only "
                "starved of CPU"
            )
        if elapsed > self.ceiling:
            raise WaitExpired(
                f"the DirectML host gave no answer to {self.what} in {elapsed:.0f} s, past the ceiling "
                f"of {self.ceiling:.0f} s ({used}); set {self.ceiling_setting} to more seconds to wait "
                "longer"
            )

    def _used(self, cpu: float | None) -> str:
        if cpu is None or self.cpu0 is None:
            return "its CPU time is unknown"
        return f"it used {cpu - self.cpu0:.1f} s of CPU"
