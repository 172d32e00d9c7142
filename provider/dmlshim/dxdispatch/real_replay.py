"""Replay every node folder of an export on DirectML.dll itself, as ``dxdispatch.exe`` would.

For each folder ``dmlshim export`` wrote, the descriptor in ``model.json`` is created, compiled,
initialized and dispatched by real DirectML (through the replay host, under Wine on Linux), and the
``writeFile`` command's file (``dml_output.npy``) is written into the folder from the bytes DirectML left.
``dml_replay.json`` beside it records what ran (DirectML's version, the adapter, the host's outcome), so
:func:`dmlshim.dxdispatch.compare.compare_export` can name DirectML's refusal for a node with no output.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInputError, DmlShimError
from ..fileio.files import write_json
from .compare import REPLAY_RECORD_FILE, export_entries
from .export import DML_OUTPUT_FILE, MODEL_FILE
from .host_build import build_host
from .host_jobs import HostResult, write_job, write_outputs
from .host_run import DeviceInfo, run_host
from .host_stack import HostStack, load_stack
from .model_file import DxDispatchModel, load_model_file

log = logging.getLogger(__name__)

__all__ = [
    "REPLAY_RECORD_FILE",
    "DirectMLReplay",
    "NodeReplay",
    "replay_export_on_directml",
    "replay_folders",
]


@dataclass(frozen=True)
class NodeReplay:
    """One node folder replayed on DirectML.

    Attributes:
        folder: the node folder.
        result: what the host reported (``ok``, or the failing step and HRESULT).
        written: the files ``writeFile`` produced (``dml_output.npy``), empty unless ok.
    """

    folder: Path
    result: HostResult
    written: tuple[Path, ...] = ()


@dataclass(frozen=True)
class DirectMLReplay:
    """Every node folder of a replay, and the device they ran on.

    Attributes:
        device: the DirectML device (version, feature level, adapter).
        nodes: one entry per folder, in the order given.
        processes: host processes started (more than one when the host died in a job).
        seconds: wall time of the host processes (Wine start-up included).
    """

    device: DeviceInfo
    nodes: tuple[NodeReplay, ...]
    processes: int
    seconds: float

    @property
    def all_ran(self) -> bool:
        return all(n.result.ok for n in self.nodes)


def _record(device: DeviceInfo, result: HostResult, stack: HostStack) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tool": "dmlshim compare --run-directml",
        "device": device.to_json(),
        "stack": str(stack.source) if stack.source else None,
        "result": result.to_json(),
    }


def replay_folders(
    folders: Sequence[Path],
    *,
    stack: HostStack | None = None,
    exe: Path | None = None,
    timeout_s: float = 600.0,
    work_dir: Path | None = None,
) -> DirectMLReplay:
    """Run each folder's ``model.json`` on DirectML.dll and write its ``writeFile`` outputs into it.

    Args:
        folders: folders each holding a DxDispatch ``model.json`` (an export's node folders).
        stack: real DirectML as set up (default: :func:`host_stack.load_stack`).
        exe: the replay host (default: built from the shipped source, cached).
        timeout_s: the limit for one host process.
        work_dir: where the job folders go (default: a temporary folder, removed afterwards).

    Returns:
        The device and one :class:`NodeReplay` per folder. A stale ``dml_output.npy`` of a folder whose
        replay failed is removed, so a later comparison cannot judge an old file.

    Raises:
        StackMissingError: real DirectML is not set up.
        BadInputError: the host cannot be built or cannot create its device.
    """
    stack = stack or load_stack()
    exe = exe or build_host()
    with tempfile.TemporaryDirectory(prefix="dmlshim-dml-", dir=work_dir) as tmp:
        run_dir = Path(tmp)
        models: dict[str, DxDispatchModel] = {}
        early: dict[str, HostResult] = {}
        jobs: list[str] = []
        for i, folder in enumerate(folders):
            job = f"j{i:05d}"
            try:
                model = load_model_file(folder / MODEL_FILE)
                (run_dir / job).mkdir()
                write_job(model, run_dir / job)
            except DmlShimError as exc:
                early[job] = HostResult("error", stage="read_model", message=exc.message)
                continue
            models[job] = model
            jobs.append(job)
        run = run_host(exe, run_dir, jobs, stack, timeout_s=timeout_s) if jobs else None
        device = run.device if run else DeviceInfo()
        nodes: list[NodeReplay] = []
        for i, folder in enumerate(folders):
            job = f"j{i:05d}"
            result = early.get(job) or (run.results.get(job) if run else None) or HostResult("missing")
            written: tuple[Path, ...] = ()
            if result.ok:
                try:
                    written = tuple(w.path for w in write_outputs(models[job], run_dir / job, folder))
                except DmlShimError as exc:
                    result = HostResult("error", stage="write_outputs", message=exc.message)
            if not result.ok:
                stale = folder / DML_OUTPUT_FILE
                if stale.is_file() and not stale.is_symlink():
                    stale.unlink()
            write_json(folder / REPLAY_RECORD_FILE, _record(device, result, stack), overwrite=True)
            if not result.ok:
                log.warning("%s: DirectML %s", folder.name, result.describe())
            nodes.append(NodeReplay(folder, result, written))
    return DirectMLReplay(device, tuple(nodes), run.processes if run else 0, run.seconds if run else 0.0)


def replay_export_on_directml(
    directory: str | os.PathLike[str],
    *,
    stack: HostStack | None = None,
    exe: Path | None = None,
    timeout_s: float = 600.0,
) -> DirectMLReplay:
    """Replay every node folder of an export directory on DirectML.dll (see :func:`replay_folders`).

    Raises:
        BadInputError: the directory is not an export directory.
        StackMissingError: real DirectML is not set up.
    """
    root = Path(directory)
    if not root.is_dir():
        raise BadInputError("export directory not found", path=str(root))
    folders = []
    for folder, _node, _op in export_entries(root):
        if os.sep in folder or "/" in folder or folder in ("", ".", ".."):
            continue  # compare reports such an index entry; nothing is run for it
        folders.append(root / folder)
    return replay_folders(folders, stack=stack, exe=exe, timeout_s=timeout_s)
