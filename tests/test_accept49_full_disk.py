"""Acceptance round 49, a full disk: ``dmlshim export`` that could write no node's files is no success
(exit code 2, an error naming the node) and ``dmlshim replay -o full/new`` leaves no empty folder.
The full disk is a 64 KiB tmpfs (mounting needs root: skipped otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

PROVIDER = str(Path(__file__).resolve().parents[1] / "provider")


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, nearly filled."""
    where = tmp_path / "full"
    where.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True, timeout=30)


def _fill(path: Path) -> None:
    """Fill the file system ``path`` is on: written until it has no room left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)  # test scaffolding, not a dmlshim output
    try:
        while os.write(fd, b"\0" * 4096) == 4096:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": PROVIDER},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _gather_model(path: Path) -> None:
    """A Gather whose data (256x256 float32, 256 KiB) cannot fit in the tmpfs."""
    data = numpy_helper.from_array(np.arange(256 * 256, dtype=np.float32).reshape(256, 256), "data")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["data", "i"], ["y"], axis=0, name="gather")],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])],
        [data],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.mark.parametrize("as_json", [False, True])
def test_export_of_nothing_on_a_full_disk_fails(tmp_path: Path, full: Path, as_json: bool) -> None:
    model = tmp_path / "m.onnx"
    _gather_model(model)
    done = _cli("export", str(model), "-o", str(full / "exp"), *(["--json"] if as_json else []), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "no node was exported" in done.stderr and "gather (Gather)" in done.stderr, done.stderr
    assert sorted(os.listdir(full)) == [], "a failed export leaves nothing"
    if as_json:
        doc = json.loads(done.stdout)
        assert doc["exported"] == [] and [s["code"] for s in doc["skipped"]] == ["EXPORT_FAILED"]


def test_export_with_room_still_succeeds(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    _gather_model(model)
    done = _cli("export", str(model), "-o", str(tmp_path / "exp"), cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert (tmp_path / "exp" / "index.json").is_file()


def test_replay_on_a_full_disk_leaves_no_folder(tmp_path: Path, full: Path) -> None:
    model = tmp_path / "m.onnx"
    _gather_model(model)
    exported = _cli("export", str(model), "-o", str(tmp_path / "exp"), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    (node,) = [p for p in (tmp_path / "exp").iterdir() if p.is_dir()]
    _fill(full / "filler")
    done = _cli("replay", str(node / "model.json"), "-o", str(full / "new" / "rp"), cwd=node)
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert sorted(os.listdir(full)) == ["filler"], done.stderr
