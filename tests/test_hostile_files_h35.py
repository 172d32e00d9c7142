"""A hostile pass on what issue 35 touched (a session's own weights, the mapped external data, the write
rules): files that change while they are read, FIFOs and links put in place of a model's files after the
session is built, a summary path that is a FIFO. Every case ends in onnxruntime's values or a clear
error: never a hang, a crash or another file written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import dmlshim
from dmlshim.errors import BadModelError
from dmlshim.execute.weights import file_slices as weight_file
from dmlshim.execute.weights import snapshot as weight_snapshot
from tests.oracle import assert_same_bits, ort_run
from tests.test_weightless_load import _model, _save

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def walk_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weight_file, "WALK_MIN_GRAPH_BYTES", 0)


@pytest.fixture(autouse=True)
def no_hang() -> object:
    """A case that would block forever (a FIFO opened for reading) fails instead."""
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("blocked"))
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_model_written_while_its_weights_are_copied_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = _model()
    path = _save(model, tmp_path, external=False)
    real = weight_snapshot._copy_range

    def racing(src: int, dst: int, offset: int, length: int, out: int) -> None:
        real(src, dst, offset, length, out)
        with open(path, "ab") as f:  # another writer appends while the weights are copied
            f.write(b"\0")

    monkeypatch.setattr(weight_snapshot, "_copy_range", racing)
    before = set(Path(tempfile.gettempdir()).glob("dmlshim-weights-*"))
    with pytest.raises(BadModelError, match="changed while its weights were read"):
        dmlshim.InferenceSession(str(path))
    after = set(Path(tempfile.gettempdir()).glob("dmlshim-weights-*"))
    assert after <= before  # the partial copy is gone


@pytest.mark.parametrize("what", ["fifo", "link"])
def test_inline_model_replaced_by_a_fifo_or_a_link(tmp_path: Path, what: str) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    expected = ort_run(model, feeds)
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "elsewhere.onnx").write_bytes(b"\0" * 4096)
        path.symlink_to(tmp_path / "elsewhere.onnx")
    assert_same_bits(session.run(None, feeds), expected)
    session.set_providers(["CPUExecutionProvider"])  # built again: from the session's own copy
    assert_same_bits(session.run(None, feeds), expected)


def test_external_data_replaced_by_a_fifo_keeps_the_mapping_and_refuses_a_rebuild(tmp_path: Path) -> None:
    """onnxruntime keeps the bytes it mapped when the file is replaced: so does the session; building it
    again would read the FIFO, which is refused (never opened for reading, never a hang)."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    session = dmlshim.InferenceSession(str(path))
    expected = ort_run(model, feeds)
    data = tmp_path / "model.bin"
    data.unlink()
    os.mkfifo(data)
    assert_same_bits(session.run(None, feeds), expected)
    with pytest.raises(BadModelError, match="changed since the session was created"):
        session.set_providers(["CPUExecutionProvider"])


def test_external_data_cut_then_restored_runs_again(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    session = dmlshim.InferenceSession(str(path))
    data = tmp_path / "model.bin"
    whole = data.read_bytes()
    os.truncate(data, len(whole) // 2)
    with pytest.raises(BadModelError, match="was cut to"):
        session.run(None, feeds)
    with open(data, "r+b") as f:  # the same file, whole again
        f.seek(0)
        f.write(whole)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_the_copy_folder_gone_is_an_error_on_rebuild_not_a_crash(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    session._loaded.snapshot.remove()  # type: ignore[union-attr]  # someone removed the temporary folder
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))  # the mappings stay
    with pytest.raises(BadModelError):
        session.set_providers(["CPUExecutionProvider"])


def test_a_summary_path_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("print('ran')\n")
    os.mkfifo(tmp_path / "sum.json")
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), "DMLSHIM_ORT_SUMMARY": "off"}
    env.pop("DMLSHIM_ORT_SUMMARY_FILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "--summary-file", "sum.json", "--overwrite", "s.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "FIFO" in done.stderr, done.stderr
    assert "ran" not in done.stdout  # refused before the program ran


def test_validate_owns_the_weights_too(tmp_path: Path) -> None:
    """validate reads the model once: its sessions read the weights from its own copy."""
    from dmlshim.validate import validate_model

    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    report = validate_model(str(path), inputs=feeds)
    assert report.match
    assert np.asarray(feeds["ids"]).shape == (4,)


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
def test_validate_of_a_model_whose_weights_are_copied_in_every_engine(tmp_path: Path, engine: str) -> None:
    """validate's onnxruntime reference reads the model file itself (it was handed the copy's folder once,
    and found no model there)."""
    from dmlshim.validate import validate_model

    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    report = validate_model(str(path), inputs=feeds, engine=engine)
    assert report.match
