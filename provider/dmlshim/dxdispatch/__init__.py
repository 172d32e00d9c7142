"""DxDispatch model files: read, write and replay them with dmlshim's kernels.

DxDispatch is DirectML's own command-line runner; a model file it reads lets a user replay one of our
descriptors on real DirectML hardware and compare with dmlshim's emulated output.
"""

from __future__ import annotations

from .model_file import (
    BufferResource,
    Command,
    ConstantValues,
    Dispatchable,
    DispatchCommand,
    DxDispatchModel,
    InitialValues,
    NpyFile,
    PrintCommand,
    SequenceValues,
    ValueList,
    WriteFileCommand,
    load_model_file,
    model_from_json,
    single_operator_model,
    write_model_file,
)

__all__ = [
    "BufferResource",
    "Command",
    "ConstantValues",
    "DispatchCommand",
    "Dispatchable",
    "DxDispatchModel",
    "InitialValues",
    "NpyFile",
    "PrintCommand",
    "SequenceValues",
    "ValueList",
    "WriteFileCommand",
    "load_model_file",
    "model_from_json",
    "single_operator_model",
    "write_model_file",
]
