"""Hostile round 10: `dmlshim compare` on a hand-edited index.json and on hostile dml_output.npy files.

Every malformed index must be refused naming what is wrong (never read as "0 nodes, all match"), and every
unreadable or look-alike output must be reported against that node, never as a match.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dxdispatch.compare import compare_export
from dmlshim.dxdispatch.export import export_model
from dmlshim.errors import BadInputError

MODELS = Path(__file__).resolve().parent.parent / "onnx_models"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scatternd_kv_cache exported and replayed with dmlshim's kernels (two ScatterND nodes)."""
    out = tmp_path_factory.mktemp("h10") / "export"
    with np.load(MODELS / "scatternd_kv_cache.npz", allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    result = export_model(MODELS / "scatternd_kv_cache.onnx", out, inputs=feeds)
    assert len(result.exported) == 2
    for node in result.exported:
        folder = out / node.folder
        assert main(["replay", str(folder / "model.json"), "-o", str(folder), "-q"]) == 0
    return out


@pytest.fixture
def export(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "export"
    shutil.copytree(template, target)
    return target


def _edit_index(directory: Path, edit: Any) -> None:
    doc = json.loads((directory / "index.json").read_text())
    doc = edit(doc)
    (directory / "index.json").write_text(json.dumps(doc))


def test_replayed_export_matches(export: Path) -> None:
    result = compare_export(export)
    assert result.all_match and len(result.nodes) == 2


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: {**d, "exported": {}}, "exported"),  # was read as an empty list: 0 nodes, exit 0
        (lambda d: {**d, "exported": None}, "exported"),
        (lambda d: {**d, "exported": "014_node"}, "exported"),
        (lambda d: [d], "object"),
        (lambda d: {k: v for k, v in d.items() if k != "exported"}, "exported"),
        (lambda d: {**d, "exported": [5]}, "exported[0]"),
        (lambda d: {**d, "exported": [{**d["exported"][0], "folder": 5}]}, "folder"),  # was read as "5"
        (lambda d: {**d, "exported": [{"folder": d["exported"][0]["folder"]}]}, "node"),
    ],
)
def test_malformed_index_is_refused_naming_the_field(export: Path, edit: Any, says: str, capsys: Any) -> None:
    _edit_index(export, edit)
    with pytest.raises(BadInputError, match="not an export index") as caught:
        compare_export(export)
    assert says in str(caught.value)
    assert main(["compare", str(export)]) == 2
    err = capsys.readouterr().err
    assert "not an export index" in err and "Traceback" not in err


def test_empty_exported_list_stays_valid(export: Path) -> None:
    """An export whose every node was skipped writes "exported": []: that is no error."""
    _edit_index(export, lambda d: {**d, "exported": []})
    assert compare_export(export).nodes == ()


def _first(export: Path) -> Path:
    return export / json.loads((export / "index.json").read_text())["exported"][0]["folder"]


def _replace(path: Path, write: Any) -> None:
    path.unlink()
    write(path)


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        (lambda p: np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True), "Python objects"),
        (lambda p: p.write_bytes(b""), "not a numpy array file"),
        (lambda p: os.symlink("/etc/passwd", p), "not a numpy array file"),
        (lambda p: np.save(p, np.zeros(3, dtype=[("a", "<f4")])), "dtype"),
        (lambda p: np.save(p, np.float32(0)), "shape []"),
    ],
)
def test_hostile_dml_output_is_a_mismatch(export: Path, plant: Any, says: str) -> None:
    folder = _first(export)
    _replace(folder / "dml_output.npy", plant)
    nodes = compare_export(export).nodes
    assert [n.status for n in nodes] == ["mismatch", "match"]
    assert says in nodes[0].detail


def test_same_bits_other_dtype_and_byte_order_are_mismatches(export: Path) -> None:
    """The bits of the expected float32 values as int32, or the same values big-endian, are not a match."""
    folder = _first(export)
    expected = np.load(folder / "expected_output.npy")
    for planted in (expected.view(np.int32), expected.astype(">f4")):
        _replace(folder / "dml_output.npy", lambda p, a=planted: np.save(p, a))
        assert compare_export(export).nodes[0].status == "mismatch"
    # Fortran order holds the same values: DxDispatch's reader would see the same array
    _replace(folder / "dml_output.npy", lambda p: np.save(p, np.asfortranarray(expected)))
    assert compare_export(export).nodes[0].status == "match"


def test_fifo_output_does_not_hang(export: Path) -> None:
    folder = _first(export)
    _replace(folder / "dml_output.npy", os.mkfifo)
    assert compare_export(export).nodes[0].status == "missing"
