"""Job folders for the DirectML replay host (``host/dml_replay_host.c``), and reading its results back.

A DxDispatch model becomes one job folder: ``job.txt`` (a line format the C host parses with ``fscanf``:
the buffers, each dispatchable's descriptor as DirectML's structs hold it, the dispatches with their
bindings) and ``buf<i>.bin`` (each buffer's initial bytes). The host runs the dispatches on DirectML.dll
and writes ``out<i>.bin`` (each buffer's final bytes) and ``result.txt``. ``writeFile`` commands are then
carried out here on the bytes DirectML left, exactly as :mod:`dmlshim.dxdispatch.replay` does with
dmlshim's own kernels, so ``dml_output.npy`` is what ``dxdispatch.exe`` would have written.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dml.tensor import BufferTensorDesc
from ..errors import BadInputError
from ..fileio.files import write_bytes, write_text
from ..fileio.reading import read_text
from .model_file import DispatchCommand, DxDispatchModel, WriteFileCommand
from .replay import WrittenFile, initial_buffer, model_source_files, write_buffer_file

log = logging.getLogger(__name__)

__all__ = [
    "EXECUTION_FLAG_VALUES",
    "JOB_FILE",
    "RESULT_FILE",
    "HostResult",
    "job_text",
    "read_result",
    "write_job",
    "write_outputs",
]

JOB_FILE = "job.txt"
RESULT_FILE = "result.txt"
JOB_VERSION = 1

EXECUTION_FLAG_VALUES: Mapping[str, int] = {
    "NONE": 0,
    "ALLOW_HALF_PRECISION_COMPUTATION": 1,
    "DISABLE_META_COMMANDS": 2,
    "DESCRIPTORS_VOLATILE": 4,
}
"""DML_EXECUTION_FLAGS values (DirectML.h)."""

# The C host's fixed limits (MAX_BUFFERS, MAX_DISPATCHABLES, MAX_DISPATCHES in dml_replay_host.c).
_MAX_BUFFERS = 16
_MAX_DISPATCHABLES = 8
_MAX_DISPATCHES = 16


@dataclass(frozen=True)
class HostResult:
    """What the host reported for one job (``result.txt``).

    Attributes:
        status: ``ok``; ``error`` (DirectML or D3D12 refused a step); ``timeout`` (the GPU never finished);
            ``crash`` (the host died in this job); ``running`` or ``missing`` (the host never finished it).
        stage: the step that failed: ``create_operator``, ``compile_operator``, ``initialize``,
            ``dispatch``, ... ("" when ok).
        index: the dispatchable (or dispatch) the stage concerns, or -1.
        hresult: the HRESULT as an unsigned 32-bit number (0 when ok).
        message: one sentence from the host ("" when ok).
        ms_compile: milliseconds spent creating and compiling the operators.
        ms_init: milliseconds spent initializing them.
        ms_dispatch: milliseconds from recording the dispatches to the read-back copy's completion.
        ms_total: milliseconds for the whole job in the host (buffers and read-back included).
    """

    status: str
    stage: str = ""
    index: int = -1
    hresult: int = 0
    message: str = ""
    ms_compile: float = 0.0
    ms_init: float = 0.0
    ms_dispatch: float = 0.0
    ms_total: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        """One line for people: ``ok``, or the failing step with its HRESULT."""
        if self.ok:
            return "ok"
        text = f"{self.status}"
        if self.stage:
            text += f" at {self.stage}"
        if self.hresult:
            text += f" (HRESULT 0x{self.hresult:08x}{_hresult_name(self.hresult)})"
        if self.message:
            text += f": {self.message}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "stage": self.stage,
            "index": self.index,
            "hresult": f"0x{self.hresult:08x}",
            "message": self.message,
            "ms_compile": self.ms_compile,
            "ms_init": self.ms_init,
            "ms_dispatch": self.ms_dispatch,
            "ms_total": self.ms_total,
        }


_HRESULT_NAMES = {
    0x80070057: "E_INVALIDARG",
    0x80004001: "E_NOTIMPL",
    0x80004005: "E_FAIL",
    0x8007000E: "E_OUTOFMEMORY",
    0x887A0005: "DXGI_ERROR_DEVICE_REMOVED",
    0x887A0006: "DXGI_ERROR_DEVICE_HUNG",
    0x887A0007: "DXGI_ERROR_DEVICE_RESET",
    0x887A0020: "DXGI_ERROR_DRIVER_INTERNAL_ERROR",
    0x800705B4: "ERROR_TIMEOUT",
    0x80070032: "ERROR_NOT_SUPPORTED",
}


def _hresult_name(value: int) -> str:
    name = _HRESULT_NAMES.get(value)
    return f" {name}" if name else ""


def _tensor_line(tensor: BufferTensorDesc) -> str:
    strides = tensor.strides
    fields = [
        "t",
        int(tensor.data_type),
        int(tensor.flags),
        len(tensor.sizes),
        tensor.total_tensor_size_in_bytes,
        tensor.guaranteed_base_offset_alignment,
        0 if strides is None else 1,
        *tensor.sizes,
        *(strides or ()),
    ]
    return " ".join(str(f) for f in fields)


def job_text(model: DxDispatchModel, buffer_files: Mapping[str, str | None]) -> str:
    """``job.txt`` for ``model``; ``buffer_files`` names each resource's initial-bytes file (None: zeros).

    Raises:
        BadInputError: the model exceeds the host's fixed limits (buffers, dispatchables, dispatches).
    """
    names = list(model.resources)
    dispatchables = list(model.dispatchables)
    dispatches = [c for c in model.commands if isinstance(c, DispatchCommand)]
    for what, count, limit in (
        ("buffers", len(names), _MAX_BUFFERS),
        ("dispatchables", len(dispatchables), _MAX_DISPATCHABLES),
        ("dispatches", len(dispatches), _MAX_DISPATCHES),
    ):
        if count > limit:
            raise BadInputError(
                f"the DirectML replay host takes at most {limit} {what}; this model has {count}"
            )
    lines = [f"dmlreplay-job {JOB_VERSION}", f"buffers {len(names)}"]
    for name in names:
        size = model.resources[name].buffer_size_in_bytes
        lines.append(f"b {size} {buffer_files.get(name) or '-'}")
    lines.append(f"dispatchables {len(dispatchables)}")
    for name in dispatchables:
        d = model.dispatchables[name]
        flags = 0
        for flag in d.execution_flags:
            flags |= EXECUTION_FLAG_VALUES[flag]
        tensors = d.desc.tensors()
        uints = d.desc.uints()
        lines.append(f"op {int(d.desc.operator_type)} {flags} {len(tensors)} {len(uints)}")
        lines.extend(_tensor_line(t) for t in tensors.values())
        lines.append(" ".join(["u", *(str(v) for v in uints.values())]))
    lines.append(f"dispatches {len(dispatches)}")
    for command in dispatches:
        desc = model.dispatchables[command.dispatchable].desc
        bound = [names.index(command.bindings[field]) for field in desc.TENSOR_FIELDS]
        lines.append(" ".join(["d", str(dispatchables.index(command.dispatchable)), *map(str, bound)]))
    lines.append("end")
    return "\n".join(lines) + "\n"


def write_job(model: DxDispatchModel, folder: Path) -> None:
    """Write ``model`` as a job folder (``job.txt`` and ``buf<i>.bin``) into the existing ``folder``.

    The folder is scratch in a private temporary folder, read once by the host: not synced to disk.
    """
    files: dict[str, str | None] = {}
    for i, (name, resource) in enumerate(model.resources.items()):
        data = initial_buffer(resource)
        if not data.any():
            files[name] = None  # the host zero-fills: no file for an all-zero buffer
            continue
        files[name] = f"buf{i}.bin"
        write_bytes(folder / f"buf{i}.bin", data.tobytes(), overwrite=True, sync=False)
    write_text(folder / JOB_FILE, job_text(model, files), overwrite=True, sync=False)


def read_result(folder: Path) -> HostResult:
    """``result.txt`` of a job folder; ``missing`` when the host never reached the job."""
    path = folder / RESULT_FILE
    if not os.path.lexists(path):
        return HostResult("missing", message="the host did not reach this job")
    fields: dict[str, str] = {}
    for line in read_text(path, what=RESULT_FILE).splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value.strip()

    def number(key: str) -> float:
        try:
            return float(fields.get(key, "0"))
        except ValueError:
            return 0.0

    try:
        hresult = int(fields.get("hr", "0"), 16)
    except ValueError:
        hresult = 0
    try:
        index = int(fields.get("index", "-1"))
    except ValueError:
        index = -1
    return HostResult(
        status=fields.get("status", "missing"),
        stage=fields.get("stage", ""),
        index=index,
        hresult=hresult,
        message=fields.get("message", ""),
        ms_compile=number("ms_compile"),
        ms_init=number("ms_init"),
        ms_dispatch=number("ms_dispatch"),
        ms_total=number("ms_total"),
    )


def final_buffers(model: DxDispatchModel, folder: Path) -> dict[str, np.ndarray]:
    """Each buffer's bytes after the host's dispatches (``out<i>.bin``), as uint8 arrays.

    Raises:
        BadInputError: a file is missing or has the wrong size (the host did not finish the job).
    """
    out: dict[str, np.ndarray] = {}
    for i, (name, resource) in enumerate(model.resources.items()):
        path = folder / f"out{i}.bin"
        size = resource.buffer_size_in_bytes
        if not path.is_file() or path.stat().st_size != size:
            raise BadInputError(f"the host wrote no complete read-back of buffer {name!r}", path=str(path))
        out[name] = np.fromfile(path, dtype=np.uint8)
    return out


def write_outputs(model: DxDispatchModel, job_folder: Path, output_dir: Path) -> tuple[WrittenFile, ...]:
    """Carry out the model's ``writeFile`` commands on the buffers DirectML left, into ``output_dir``.

    Returns:
        The files written (``dml_output.npy`` for an export's node folder).
    """
    buffers = final_buffers(model, job_folder)
    sources = model_source_files(model)
    written: list[WrittenFile] = []
    for i, command in enumerate(model.commands):
        if isinstance(command, WriteFileCommand):
            resource = model.resources[command.resource]
            written.append(
                write_buffer_file(
                    command,
                    buffers[command.resource],
                    resource.data_type,
                    output_dir,
                    f"$.commands[{i}]",
                    sources,
                    overwrite=True,  # the export's node folder is dmlshim's: each DirectML run refreshes it
                )
            )
    return tuple(written)
