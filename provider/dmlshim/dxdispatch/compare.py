"""Compare DirectML's outputs (``dml_output.npy``, written by DxDispatch) with dmlshim's expected outputs.

Works on any machine: it only reads the ``.npy`` files of an export directory made by ``dmlshim export``.
Integer outputs must be equal; float outputs within a tolerance, with NaN equal to NaN (gather/scatter
only move values, so any difference at all is worth a look: the table shows the largest one).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..comparison import DEFAULT_ATOL, DEFAULT_RTOL, array_difference, exact_difference
from ..dml.json_form import describe
from ..errors import BadInputError, DmlShimError
from ..fileio.reading import read_json, read_npy
from ..resources import guard_resources
from ..text import printable
from .export import DML_OUTPUT_FILE, EXPECTED_OUTPUT_FILE, INDEX_FILE, MODEL_FILE

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "CompareReport",
    "NodeComparison",
    "compare_arrays",
    "compare_export",
    "export_entries",
]


MATCH = "match"
MISMATCH = "mismatch"
MISSING = "missing"
ERROR = "error"

REPLAY_RECORD_FILE = "dml_replay.json"
"""What ``compare --run-directml`` left in a node folder (see :mod:`dmlshim.dxdispatch.real_replay`)."""


@dataclass(frozen=True)
class NodeComparison:
    """The comparison of one exported node.

    Attributes:
        folder: the node's folder inside the export directory.
        node: the ONNX node name.
        op_type: the ONNX op type.
        status: ``match``, ``mismatch``, ``missing`` (no ``dml_output.npy``, or no expected output) or
            ``error`` (replayed on DirectML.dll, which refused or failed to run the descriptor).
        mismatches: the number of differing elements (0 unless the arrays have the same shape).
        max_abs_diff: the largest absolute difference (inf where only one side is NaN or the infinities
            differ), or None when the arrays cannot be compared element-wise.
        first_mismatch: the index of the first differing element in C order, or None.
        detail: why, in one sentence (shape/dtype differences, unreadable files), or "".
    """

    folder: str
    node: str
    op_type: str
    status: str
    mismatches: int = 0
    max_abs_diff: float | None = None
    first_mismatch: tuple[int, ...] | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        diff = self.max_abs_diff
        return {
            "folder": self.folder,
            "node": self.node,
            "op_type": self.op_type,
            "status": self.status,
            "mismatches": self.mismatches,
            # JSON has no infinity; strings as in DxDispatch files.
            "max_abs_diff": diff if diff is None or math.isfinite(diff) else str(diff),
            "first_mismatch": list(self.first_mismatch) if self.first_mismatch is not None else None,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class CompareReport:
    """Every node of an export directory, compared.

    Attributes:
        directory: the export directory.
        rtol: the relative tolerance used for floats.
        atol: the absolute tolerance used for floats.
        nodes: one comparison per exported node, in export order.
    """

    directory: Path
    rtol: float
    atol: float
    nodes: tuple[NodeComparison, ...]

    @property
    def all_match(self) -> bool:
        """True when every node matched (an export with no nodes matches trivially)."""
        return all(n.status == MATCH for n in self.nodes)

    def counts(self) -> dict[str, int]:
        """Nodes per status."""
        out = {MATCH: 0, MISMATCH: 0, MISSING: 0, ERROR: 0}
        for n in self.nodes:
            out[n.status] = out.get(n.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "directory": str(self.directory),
            "rtol": self.rtol,
            "atol": self.atol,
            "all_match": self.all_match,
            "counts": self.counts(),
            "nodes": [n.to_json() for n in self.nodes],
        }


def compare_arrays(
    expected: np.ndarray, actual: np.ndarray, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL
) -> tuple[int, float | None, tuple[int, ...] | None, str]:
    """Element-wise comparison of an expected and an actual output.

    Integers (and bools) must be equal; floats must satisfy ``|a - e| <= atol + rtol * |e|``, with NaN equal
    to NaN and infinities equal only to the same infinity. Without a tolerance (the default) floats must
    have identical bits, any NaN equal to any NaN: DirectML copies values, so ``-0.0`` for ``0.0`` differs.

    Returns:
        (number of differing elements, max absolute difference, first differing index, detail); the count
        is -1 and the difference None when shapes or dtypes differ.
    """
    if expected.dtype != actual.dtype:
        return -1, None, None, f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected.shape != actual.shape:
        return -1, None, None, f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    exact = rtol == 0 and atol == 0
    d = exact_difference(actual, expected) if exact else array_difference(actual, expected, rtol, atol)
    return d.mismatches, d.max_abs_diff, d.first, ""


def export_entries(directory: Path) -> Iterator[tuple[str, str, str]]:
    """(folder, node, op_type) per exported node: from index.json, else every folder with a model.json."""
    index = directory / INDEX_FILE
    if os.path.lexists(index):
        entries = _index_entries(read_json(index, what=INDEX_FILE), index)
        seen: set[str] = set()
        for folder, _node, _op in entries:
            if folder in seen:
                # each exported node has a folder of its own: a second entry would count one node twice
                raise BadInputError(
                    f"{INDEX_FILE} is not an export index: folder {printable(folder)} is listed twice",
                    path=str(index),
                )
            seen.add(folder)
        yield from entries
        return
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and (p / MODEL_FILE).is_file())
    if not folders:
        raise BadInputError(
            f"not an export directory: no {INDEX_FILE} and no folder holding a {MODEL_FILE}",
            path=str(directory),
        )
    log.warning("%s has no %s; comparing every folder holding a %s", directory, INDEX_FILE, MODEL_FILE)
    for found in folders:
        yield found.name, found.name, "?"


def _index_entries(doc: object, index: Path) -> list[tuple[str, str, str]]:
    """(folder, node, op_type) of each ``exported`` entry, refusing any other shape by its JSON path."""

    def refuse(what: str) -> BadInputError:
        return BadInputError(f"{INDEX_FILE} is not an export index: {what}", path=str(index))

    # a hand-edited "exported": {} would otherwise iterate as no node at all: "0 of 0 match", exit 0
    if not isinstance(doc, dict):
        raise refuse(f"expected a JSON object, got {describe(doc)}")
    exported = doc.get("exported")
    if not isinstance(exported, list):
        raise refuse(f"$.exported: expected a list of nodes, got {describe(exported)}")
    entries = []
    for i, entry in enumerate(exported):
        if not isinstance(entry, dict):
            raise refuse(f"$.exported[{i}]: expected an object, got {describe(entry)}")
        fields = []
        for key in ("folder", "node", "op_type"):
            value = entry.get(key)
            if not isinstance(value, str):
                raise refuse(f"$.exported[{i}].{key}: expected a string, got {describe(value)}")
            fields.append(value)
        entries.append((fields[0], fields[1], fields[2]))
    return entries


def _load(path: Path) -> np.ndarray:
    try:
        array = read_npy(path, what=path.name)
    except DmlShimError as exc:  # not a regular file, or larger than the memory limit
        raise ValueError(exc.message) from None
    if not isinstance(array, np.ndarray):
        raise ValueError("an .npz archive, not an .npy array")
    return array


def _compare_node(
    directory: Path, folder: str, node: str, op_type: str, rtol: float, atol: float
) -> NodeComparison:
    base = NodeComparison(folder, node, op_type, MISSING)
    path = directory / folder
    # index.json is user-editable: a folder that escapes the directory is treated as missing.
    if os.sep in folder or "/" in folder or folder in ("", ".", ".."):
        return _with(base, detail=f"folder name {folder!r} is not a plain folder name")
    expected_file = path / EXPECTED_OUTPUT_FILE
    actual_file = path / DML_OUTPUT_FILE
    if not expected_file.is_file():
        return _with(base, detail=f"{EXPECTED_OUTPUT_FILE} not found")
    if not actual_file.is_file():
        failure = _replay_failure(path)
        if failure:
            return _with(base, status=ERROR, detail=failure)
        return _with(
            base, detail=f"{DML_OUTPUT_FILE} not found: run dxdispatch.exe model.json --output_path ."
        )
    try:
        expected = _load(expected_file)
    except (OSError, ValueError) as exc:
        return _with(base, detail=f"cannot read {EXPECTED_OUTPUT_FILE}: {exc}")
    try:
        actual = _load(actual_file)
    except (OSError, ValueError) as exc:
        return _with(base, status=MISMATCH, detail=f"cannot read {DML_OUTPUT_FILE}: {exc}")
    count, max_diff, first, detail = compare_arrays(expected, actual, rtol=rtol, atol=atol)
    if count < 0:
        return _with(base, status=MISMATCH, detail=detail)
    return NodeComparison(
        folder,
        node,
        op_type,
        MATCH if count == 0 else MISMATCH,
        mismatches=count,
        max_abs_diff=max_diff,
        first_mismatch=first,
        detail=(
            ""
            if count == 0
            else f"{count} of {expected.size} element(s) differ; first at {list(first or ())}: "
            f"expected {expected[first].item()!r}, got {actual[first].item()!r}"
        ),
    )


def _replay_failure(folder: Path) -> str:
    """DirectML's failure recorded by ``compare --run-directml`` in ``folder``, or ""."""
    record = folder / REPLAY_RECORD_FILE
    if not record.is_file():
        return ""
    try:
        result = read_json(record, what=REPLAY_RECORD_FILE)["result"]
        if result["status"] == "ok":
            return ""
        text = f"DirectML.dll: {result['status']}"
        if result.get("stage"):
            text += f" at {result['stage']}"
        if result.get("hresult") not in (None, "0x00000000"):
            text += f" (HRESULT {result['hresult']})"
        if result.get("message"):
            text += f": {result['message']}"
        return text
    except (DmlShimError, TypeError, KeyError):
        return ""


def _with(base: NodeComparison, *, status: str | None = None, detail: str) -> NodeComparison:
    return NodeComparison(base.folder, base.node, base.op_type, status or base.status, detail=detail)


@guard_resources("comparing an export")
def compare_export(
    directory: str | os.PathLike[str], *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL
) -> CompareReport:
    """Compare every exported node's ``dml_output.npy`` with its ``expected_output.npy``.

    Args:
        directory: an export directory written by ``dmlshim export``.
        rtol: relative tolerance for float outputs.
        atol: absolute tolerance for float outputs.

    Returns:
        One comparison per node listed in ``index.json`` (or, without one, per folder holding a
        ``model.json``).

    Raises:
        BadInputError: the directory does not exist or is not an export directory, or a tolerance is
            negative or not finite.
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not math.isfinite(value) or value < 0:
            raise BadInputError(f"{name} must be a finite non-negative number", value=value)
    root = Path(directory)
    if not root.is_dir():
        raise BadInputError("export directory not found", path=str(root))
    nodes = tuple(
        _compare_node(root, folder, node, op_type, rtol, atol)
        for folder, node, op_type in export_entries(root)
    )
    report = CompareReport(root, rtol, atol, nodes)
    log.info("compared %d node(s) in %s: %s", len(nodes), root, report.counts())
    return report
