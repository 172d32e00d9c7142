"""Hostile DxDispatch files: replay writes only inside --output-path, reads only regular .npy files inside
the model's folder, checks declared sizes against DMLSHIM_MEMORY_LIMIT before allocating, and turns deep
JSON nesting into exit 2 with a sentence (issue 12)."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fuzz_settings import assert_cli_error, run_cli
from tests.safety_helpers import run_child
from tests.test_replay import GATHER_ELEMENTS_EXPECTED, gather_elements_model, save

REPO = Path(__file__).resolve().parents[1]
LIMIT = 100_000_000  # DMLSHIM_MEMORY_LIMIT for the hostile files below: 100 MB


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _with_target(target: Any) -> dict[str, Any]:
    obj = gather_elements_model()
    obj["commands"][1]["targetPath"] = target
    return obj


# --- targetPath -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("../../escaped.npy", "leaves the folder"),
        ("sub/../../escaped.npy", "leaves the folder"),
        ("ABSOLUTE", "absolute"),
        (".", "folder itself"),
        ("", "folder itself"),
        ("out\x00.npy", "NUL"),
        ("noextension", "extension"),
    ],
)
def test_target_path_leaving_the_output_folder_is_refused(tmp_path: Path, target: str, reason: str) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    out = work / "out"
    if target == "ABSOLUTE":
        target = str(tmp_path / "abs.npy")
    model = save(work, _with_target(target))
    before = _listing(tmp_path)
    r = run_cli("replay", model, "--output-path", out)
    assert_cli_error(r.code, r.err, "targetPath", reason, "expected a relative path inside the folder")
    assert _listing(tmp_path) == before  # nothing written anywhere, --output-path not even created


def test_target_path_through_a_link_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").symlink_to(outside)
    model = save(tmp_path, _with_target("sub/x.npy"))
    r = run_cli("replay", model, "--output-path", out)
    assert_cli_error(r.code, r.err, "symbolic link")
    assert _listing(outside) == set()


def test_target_path_inside_is_written(tmp_path: Path) -> None:
    model = save(tmp_path, _with_target("deep\\er/result.npy"))
    r = run_cli("replay", model, "--output-path", tmp_path / "out")
    assert r.code == 0, r.err
    np.testing.assert_array_equal(
        np.load(tmp_path / "out" / "deep" / "er" / "result.npy"), GATHER_ELEMENTS_EXPECTED
    )


# --- sourcePath -------------------------------------------------------------------------------------


def _with_source(source: str) -> dict[str, Any]:
    obj = gather_elements_model()
    obj["resources"]["input"] = {"initialValues": {"sourcePath": source}}
    return obj


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("../input.npy", "leaves the folder"),
        ("ABSOLUTE", "absolute"),
        ("link.npy", "outside the model's folder"),
    ],
)
def test_source_path_outside_the_model_folder_is_refused(tmp_path: Path, source: str, reason: str) -> None:
    outside = tmp_path / "input.npy"
    np.save(outside, np.arange(9, dtype=np.float32))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "link.npy").symlink_to(outside)
    if source == "ABSOLUTE":
        source = str(outside)
    r = run_cli("replay", save(folder, _with_source(source)), "--output-path", tmp_path / "out")
    assert_cli_error(r.code, r.err, "sourcePath", reason)


def test_source_path_fifo_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "input.npy")
    model = save(tmp_path, _with_source("input.npy"))
    # A child killed after 60 s: if the FIFO were opened for a blocking read it would hang, not the suite.
    child = run_child(["replay", str(model), "--output-path", str(tmp_path / "out")], timeout=60)
    assert_cli_error(child.returncode, child.stderr, "FIFO", "regular files")


def test_source_npy_declaring_a_huge_shape_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 28, 4)}
    with open(tmp_path / "input.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(b"\0" * 64)
    r = run_cli("replay", save(tmp_path, _with_source("input.npy")), "--output-path", tmp_path / "out")
    assert_cli_error(r.code, r.err, "4.00 GiB", "refusing")


# --- declared sizes ---------------------------------------------------------------------------------


def _size_bomb(size: int, key: str = "sizeInBytes") -> dict[str, Any]:
    obj = gather_elements_model()
    if key == "sizeInBytes":
        obj["resources"]["output"]["sizeInBytes"] = size
    else:
        obj["resources"]["output"]["initialValues"] = {"valueCount": size, "value": 0}
    return obj


@pytest.mark.parametrize(
    ("size", "key"),
    [(3221225472, "sizeInBytes"), ((1 << 64) - 1, "sizeInBytes"), ((1 << 32) - 1, "valueCount")],
    ids=["3GiB", "2^64-1", "valueCount-2^32-1"],
)
def test_declared_size_bomb_refused_before_allocating(tmp_path: Path, size: int, key: str) -> None:
    model = save(tmp_path, _size_bomb(size, key))
    start = time.perf_counter()
    child = run_child(
        ["replay", str(model), "--output-path", str(tmp_path / "out")],
        env={"DMLSHIM_MEMORY_LIMIT": str(LIMIT)},
    )
    assert_cli_error(child.returncode, child.stderr, key, "refusing before")
    assert 0 < child.peak_rss < LIMIT + 300_000_000, child.peak_rss
    assert time.perf_counter() - start < 60  # was 250 s of allocating before the fix
    assert not (tmp_path / "out").exists()


def test_many_buffers_together_over_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    obj = gather_elements_model()
    for i in range(4):
        obj["resources"][f"extra{i}"] = {
            "initialValuesDataType": "FLOAT32",
            "initialValues": {"valueCount": 1, "value": 0},
            "sizeInBytes": LIMIT // 3,
        }
    r = run_cli("replay", save(tmp_path, obj), "--output-path", tmp_path / "out")
    assert_cli_error(r.code, r.err, "buffers of $.resources together")


# --- deep nesting ------------------------------------------------------------------------------------


def test_deeply_nested_model_json(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text("[" * 100_000 + "]" * 100_000)
    r = run_cli("replay", model)
    assert_cli_error(r.code, r.err, "too deeply", str(model))
    obj = gather_elements_model()
    obj["provenance"] = json.loads("[" * 500 + "]" * 500)  # deep but parseable metadata is kept
    r = run_cli("replay", save(tmp_path, obj, "ok.json"), "--output-path", tmp_path / "out")
    assert r.code == 0, r.err


def test_deeply_nested_compare_index(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text('{"exported": ' + "[" * 100_000 + "]" * 100_000 + "}")
    r = run_cli("compare", tmp_path)
    assert_cli_error(r.code, r.err, "too deeply", "index.json")


def test_compare_index_fifo_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "index.json")
    r = run_cli("compare", tmp_path)
    assert_cli_error(r.code, r.err, "FIFO")


def test_model_file_fifo_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "model.json")
    r = run_cli("replay", tmp_path / "model.json")
    assert_cli_error(r.code, r.err, "FIFO")


def test_valid_model_still_replays(tmp_path: Path) -> None:
    obj = copy.deepcopy(gather_elements_model())
    r = run_cli("replay", save(tmp_path, obj), "--output-path", tmp_path / "out")
    assert r.code == 0, r.err
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "out.npy"), GATHER_ELEMENTS_EXPECTED)
