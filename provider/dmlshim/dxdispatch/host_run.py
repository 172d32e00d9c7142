"""Run the DirectML replay host on job folders, under Wine (Linux) or directly (Windows).

One host process runs many jobs on one D3D12 + DirectML device (Wine's start-up costs about a second).
When it dies in a job (a crash, a GPU timeout, a removed device) that job is marked and a new process
takes the jobs left, so one bad descriptor never hides the others' results. A first process that exits
before making its device without saying why is started once more (a Wine start-up hiccup).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..directml.wine import shared_display, windows_path, wine_env
from ..errors import BadInputError, EngineUnavailableError
from ..fileio.files import write_text
from ..fileio.reading import read_text
from .host_jobs import RESULT_FILE, HostResult, read_result
from .host_stack import HostStack

log = logging.getLogger(__name__)

__all__ = ["DeviceInfo", "HostRun", "allow_builtin", "run_host", "windows_path"]

JOBS_FILE = "jobs.txt"
DEVICE_FILE = "device.txt"

# dml_replay_host.c's exit codes.
_EXIT_NO_DEVICE = 2
_EXIT_TIMEOUT = 3
_EXIT_CRASH = 4
_EXIT_REMOVED = 5


@dataclass(frozen=True)
class DeviceInfo:
    """What the host found (``device.txt``).

    Attributes:
        adapter: the DXGI adapter's description (``llvmpipe ...`` on lavapipe).
        directml_dll: the DirectML.dll loaded, as Windows names it.
        directml_version: its file version (``1.15.4.0``), or "".
        d3d12_dll: the d3d12.dll loaded.
        shader_model: the device's highest shader model, e.g. ``0x60``, or "".
        created_feature_level: the feature level DMLCreateDevice1 was given (the highest it accepted).
        max_feature_level: IDMLDevice::CheckFeatureSupport's MaxSupportedFeatureLevel.
        data_types: the DML_TENSOR_DATA_TYPE values the device supports.
        lines: the file's lines as written (warnings included).
    """

    adapter: str = ""
    directml_dll: str = ""
    directml_version: str = ""
    d3d12_dll: str = ""
    shader_model: str = ""
    created_feature_level: int = 0
    max_feature_level: int = 0
    data_types: tuple[int, ...] = ()
    lines: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> DeviceInfo:
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            fields.setdefault(key, value.strip())
        types = tuple(int(v) for v in fields.get("data_types", "").split() if v.isdigit())
        return cls(
            adapter=fields.get("adapter", ""),
            directml_dll=fields.get("directml_dll", ""),
            directml_version=fields.get("directml_version", ""),
            d3d12_dll=fields.get("d3d12_dll", ""),
            shader_model=fields.get("shader_model", ""),
            created_feature_level=int(fields.get("created_feature_level", "0"), 16),
            max_feature_level=int(fields.get("max_feature_level", "0"), 16),
            data_types=types,
            lines=tuple(text.splitlines()),
        )

    def describe(self) -> str:
        """One line: DirectML version, feature level and adapter."""
        version = self.directml_version or "?"
        fl = self.max_feature_level
        return f"DirectML {version} (feature level {fl >> 12}_{(fl >> 8) & 15}) on '{self.adapter or '?'}'"

    def to_json(self) -> dict[str, object]:
        return {
            "adapter": self.adapter,
            "directml_dll": self.directml_dll,
            "directml_version": self.directml_version,
            "d3d12_dll": self.d3d12_dll,
            "shader_model": self.shader_model,
            "created_feature_level": f"0x{self.created_feature_level:x}",
            "max_feature_level": f"0x{self.max_feature_level:x}",
            "data_types": list(self.data_types),
        }


@dataclass(frozen=True)
class HostRun:
    """The outcome of running a list of jobs.

    Attributes:
        device: the device the (last) host process created.
        results: per job folder name, what the host reported.
        processes: how many host processes ran (1 unless one died in a job).
        seconds: wall time, Wine start-up included.
    """

    device: DeviceInfo
    results: Mapping[str, HostResult] = field(default_factory=dict)
    processes: int = 0
    seconds: float = 0.0


def _command(stack: HostStack, exe: Path, run_dir: Path) -> list[str]:
    args = [".", windows_path(stack.directml_dll)]
    if stack.dll_dir is not None:
        args.append(windows_path(stack.dll_dir))
    if sys.platform == "win32":
        return [str(exe), *args]
    return [*stack.launcher, str(exe), *args]


def run_host(
    exe: Path,
    run_dir: Path,
    jobs: Sequence[str],
    stack: HostStack,
    *,
    timeout_s: float = 600.0,
) -> HostRun:
    """Run ``jobs`` (folder names inside ``run_dir``, each written by :func:`host_jobs.write_job`).

    Args:
        exe: the host executable (:func:`host_build.build_host`).
        run_dir: the folder holding the job folders; the host runs with it as its current directory.
        jobs: the job folders, in order.
        stack: Wine and DirectML as set up (:func:`host_stack.load_stack`).
        timeout_s: the limit for one host process; one that runs longer is killed and its current job
            marked ``timeout``.

    Returns:
        The device and one result per job.

    Raises:
        BadInputError: the host could not create a D3D12 or DirectML device, or could not start at all.
    """
    env = wine_env(stack.env)
    if stack.dll_dir is not None and env.get("WINEDLLOVERRIDES"):
        env["WINEDLLOVERRIDES"] = allow_builtin(env["WINEDLLOVERRIDES"])
    if sys.platform != "win32" and not env.get("DISPLAY"):
        # Wine's DXGI wants a display, even to compute: the process's one Xvfb (stopped at exit).
        try:
            env["DISPLAY"] = shared_display()
        except EngineUnavailableError as exc:
            raise BadInputError(exc.message) from exc
    return _run(exe, run_dir, jobs, stack, env, timeout_s)


def allow_builtin(overrides: str) -> str:
    """``WINEDLLOVERRIDES`` with every native-only entry (``=n``) widened to ``=n,b``.

    The host loads the stack's D3D DLLs by full path from ``dll_dir`` before anything asks for them by
    name. Wine builds its PE DLLs with the builtin marker, and Wine 8's loader refuses such a file under a
    native-only override (status c0000135) when it is not in the program's own folder; ``n,b`` accepts it.
    Later loads by name find the modules already loaded, so no other d3d12.dll can come in.
    """
    entries = []
    for entry in overrides.split(";"):
        names, sep, order = entry.partition("=")
        entries.append(f"{names}=n,b" if sep and order.strip() == "n" else entry)
    return ";".join(entries)


def _run(
    exe: Path, run_dir: Path, jobs: Sequence[str], stack: HostStack, env: dict[str, str], timeout_s: float
) -> HostRun:
    start = time.monotonic()
    results: dict[str, HostResult] = {}
    remaining = list(jobs)
    device = DeviceInfo()
    processes = 0
    retried: set[str] = set()
    while remaining:
        for job in remaining:
            result_file = run_dir / job / RESULT_FILE
            if os.path.lexists(result_file):
                result_file.unlink()
        write_text(run_dir / JOBS_FILE, "\n".join(remaining) + "\n", overwrite=True)
        processes += 1
        command = _command(stack, exe, run_dir)
        log.info("running %s on %d job(s)", exe.name, len(remaining))
        killed = False
        output = ""
        try:
            done = subprocess.run(
                command,
                cwd=run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
            code = done.returncode
            output = (done.stdout + done.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired as exc:
            killed = True
            code = _EXIT_TIMEOUT
            output = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace")
        except OSError as exc:
            raise BadInputError(f"cannot start the DirectML replay host: {exc}", path=command[0]) from exc
        device_file = run_dir / DEVICE_FILE
        if device_file.is_file():
            device = DeviceInfo.parse(read_text(device_file, what=DEVICE_FILE))
        elif processes == 1 and code != _EXIT_NO_DEVICE and not killed:
            # Gone before it made its device, saying nothing: once, it is started again (a Wine start-up
            # hiccup, seen now and then in CI under load); a host that cannot make its device says so
            # (exit code _EXIT_NO_DEVICE) and is not.
            log.warning("the replay host exited (code %d) before making its device: starting it again", code)
            continue
        if code == _EXIT_NO_DEVICE or not device_file.is_file():
            raise BadInputError(
                "the DirectML replay host could not create its device: "
                + "; ".join(line for line in device.lines if line.startswith(("error", "warning")))
                + _tail(output),
                path=str(run_dir),
            )
        progressed = False
        left: list[str] = []
        for i, job in enumerate(remaining):
            result = read_result(run_dir / job)
            if result.status in ("ok", "error", "crash", "timeout"):
                results[job] = result
                progressed = True
                continue
            if result.status == "running":
                # The host died in this job. Once, it is tried again (a lost display or a Wine hiccup is
                # not the descriptor's doing); twice, it is marked and the next jobs go on in a new process.
                progressed = True
                if job not in retried and not killed:
                    retried.add(job)
                    log.warning("the replay host died in %s (exit code %d): trying it again", job, code)
                    left = list(remaining[i:])
                else:
                    results[job] = _died(result, code, killed, output)
                    left = list(remaining[i + 1 :])
                break
            left = list(remaining[i:])
            break
        if not progressed:
            for job in remaining:
                results[job] = HostResult(
                    "missing", message=f"the host exited with code {code} before this job" + _tail(output)
                )
            break
        remaining = left
    return HostRun(device, results, processes, time.monotonic() - start)


def _died(result: HostResult, code: int, killed: bool, output: str) -> HostResult:
    if killed or code == _EXIT_TIMEOUT:
        status, message = "timeout", "the host did not finish this job in time"
    elif code == _EXIT_REMOVED:
        status, message = "error", "the D3D12 device was removed"
    else:
        status, message = "crash", f"the host died in this job (exit code {code})"
    return HostResult(status, stage=result.stage or "unknown", message=message + _tail(output))


def _tail(output: str, lines: int = 3) -> str:
    text = output.strip().splitlines()
    tail = [line for line in text if line.strip()][-lines:]
    return (" [host output: " + " | ".join(tail) + "]") if tail else ""
