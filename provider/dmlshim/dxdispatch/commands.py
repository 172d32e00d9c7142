"""The ``dispatchables`` and ``commands`` of a DxDispatch model.

``writeFile`` target paths are checked when read: a relative ``.npy`` path that stays inside the output
folder (no ``..``, not absolute, no NUL), since dmlshim writes only inside ``--output-path``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..dml.json_form import (
    JsonFormError,
    check_keys,
    expect_object,
    expect_string,
    expect_uint_list,
    operator_to_json,
)
from ..dml.operators import OperatorDesc
from ..errors import BadInputError
from ..fileio.confined import confined_path

__all__ = [
    "Command",
    "DispatchCommand",
    "Dispatchable",
    "PrintCommand",
    "WriteFileCommand",
    "command_from_json",
]


# --------------------------------------------------------------------------------------------------
# Dispatchables and commands


@dataclass(frozen=True)
class Dispatchable:
    """A DirectML operator dispatchable: the descriptor and its optional ``executionFlags``."""

    desc: OperatorDesc
    execution_flags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"type": ..., "desc": {...}, ["executionFlags": ...]}``."""
        out = operator_to_json(self.desc)
        if self.execution_flags:
            flags = self.execution_flags
            out["executionFlags"] = flags[0] if len(flags) == 1 else list(flags)
        return out


@dataclass(frozen=True)
class DispatchCommand:
    """``{"type": "dispatch", "dispatchable": name, "bindings": {TensorField: resource}}``."""

    dispatchable: str
    bindings: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"type": "dispatch", "dispatchable": self.dispatchable, "bindings": dict(self.bindings)}


@dataclass(frozen=True)
class WriteFileCommand:
    """``{"type": "writeFile", "resource": name, "targetPath": file, "dimensions": [...]}``.

    Without ``dimensions`` the whole buffer (including padding) is written as a flat array.
    """

    resource: str
    target_path: str
    dimensions: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "writeFile", "resource": self.resource, "targetPath": self.target_path}
        if self.dimensions is not None:
            out["dimensions"] = list(self.dimensions)
        return out


@dataclass(frozen=True)
class PrintCommand:
    """``{"type": "print", "resource": name}``."""

    resource: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "print", "resource": self.resource}


Command = DispatchCommand | WriteFileCommand | PrintCommand
"""A command of the ``commands`` array."""


def command_from_json(obj: Any, path: str) -> Command:
    mapping = expect_object(obj, path)
    kind = expect_string(mapping.get("type"), f"{path}.type") if "type" in mapping else None
    if kind is None:
        raise JsonFormError(f"{path}.type", "missing required key 'type'", value=None)
    if kind == "dispatch":
        check_keys(mapping, path, ("type", "dispatchable", "bindings"), ("dispatchable", "bindings"))
        bindings_obj = expect_object(mapping["bindings"], f"{path}.bindings")
        bindings: dict[str, str] = {}
        for name, value in bindings_obj.items():
            bpath = f"{path}.bindings.{name}"
            if isinstance(value, Mapping):
                # DxDispatch's object form; only the plain whole-buffer binding is modelled here.
                check_keys(value, bpath, ("name",), ("name",))
                value = value["name"]
            bindings[name] = expect_string(value, bpath)
        return DispatchCommand(expect_string(mapping["dispatchable"], f"{path}.dispatchable"), bindings)
    if kind == "writeFile":
        check_keys(
            mapping, path, ("type", "resource", "targetPath", "dimensions"), ("resource", "targetPath")
        )
        dims = None
        if "dimensions" in mapping:
            dims = expect_uint_list(mapping["dimensions"], f"{path}.dimensions")
        target = expect_string(mapping["targetPath"], f"{path}.targetPath")
        try:
            confined_path(".", target, what="targetPath", suffixes=(".npy",))
        except BadInputError as exc:
            raise JsonFormError(f"{path}.targetPath", exc.message, value=target) from None
        return WriteFileCommand(expect_string(mapping["resource"], f"{path}.resource"), target, dims)
    if kind == "print":
        check_keys(mapping, path, ("type", "resource"), ("resource",))
        return PrintCommand(expect_string(mapping["resource"], f"{path}.resource"))
    raise JsonFormError(
        f"{path}.type", f"unknown command type {kind!r}; expected dispatch, writeFile or print", value=kind
    )
