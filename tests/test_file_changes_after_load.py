"""A session's results never change because its model file changed after it was built, and no change to
a file kills the process (issue 35, part 1).

Weights the .onnx file holds inline are the session's own, as onnxruntime copies them at session
creation: editing, truncating, replacing or deleting the file between runs changes nothing. External data
the user chose follows onnxruntime's own rules (its session maps the file: an edit shows, a replaced or
deleted file keeps the old bytes), except that a file cut short is refused with an error where
onnxruntime's session dies of SIGBUS. Every engine (partitioned with its whole-model check, cpu,
customop) and the drop-in (``python -m dmlshim.ort``); expected values from onnxruntime."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.errors import BadModelError
from dmlshim.execute.weights import file_slices as weight_file
from tests.oracle import assert_same_bits, ort_run
from tests.test_weightless_load import _model, _save

REPO = Path(__file__).resolve().parents[1]
ENGINES = {
    "partitioned": {},
    "cpu": {"providers": ["CPUExecutionProvider"]},
    "customop": {"engine": "customop"},
}
CHANGES = ("edit", "truncate", "replace", "delete")


@pytest.fixture(autouse=True)
def walk_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weight_file, "WALK_MIN_GRAPH_BYTES", 0)


def _change(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "edit":  # zeros over the middle half, where the weights are
        with open(path, "r+b") as f:
            f.seek(size // 4)
            f.write(b"\0" * (size // 2))
    elif how == "truncate":
        os.truncate(path, 100)
    elif how == "replace":
        other = path.with_name("other.tmp")
        other.write_bytes(b"\x7f" * size)
        os.replace(other, path)
    else:
        path.unlink()


def follows_changed_data(
    session: object, theirs: ort.InferenceSession, feeds: dict, data: Path, how: str
) -> None:
    """Change the external-data file ``data`` (``how``) under a built session: a cut file is refused on
    every run (onnxruntime's session would die of SIGBUS), any other change gives what onnxruntime's own
    session of the same file (``theirs``) now gives."""
    _change(data, how)
    if how == "truncate":
        for _ in range(2):
            with pytest.raises(BadModelError, match="was cut to 100 bytes after the session was created"):
                session.run(None, feeds)  # type: ignore[attr-defined]
        return
    expected = theirs.run(None, feeds)
    for _ in range(3):
        got = session.run(None, feeds)  # type: ignore[attr-defined]
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def _ort_session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_inline_weights_are_the_sessions_own(tmp_path: Path, engine: str, how: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    theirs = _ort_session(path)
    expected = ort_run(model, feeds)
    assert_same_bits(session.run(None, feeds), expected)
    _change(path, how)
    for _ in range(4):  # through the path trial: the whole-model check and the partitioned steps
        assert_same_bits(theirs.run(None, feeds), expected)  # onnxruntime: unchanged
        assert_same_bits(session.run(None, feeds), expected)
    # the engine built again (set_providers) from the session's own copy, not the file
    session.set_providers(["DmlExecutionProvider"] if engine == "customop" else ["CPUExecutionProvider"])
    assert_same_bits(session.run(None, feeds), expected)


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_external_data_follows_onnxruntime_without_a_crash(tmp_path: Path, engine: str, how: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    data = tmp_path / "model.bin"
    session = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    theirs = _ort_session(path)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    follows_changed_data(session, theirs, feeds, data, how)


def test_a_model_in_a_folder_with_no_room_for_a_copy_reads_its_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No copy can be made (no space): the weights are read into the model instead, still the
    session's own."""
    from dmlshim.fileio import stale_folders  # makes the copy's folder

    def no_room(*args: object, **kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stale_folders.tempfile, "mkdtemp", no_room)
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    assert session._loaded.snapshot is None
    _change(path, "truncate")
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_the_copy_is_removed_with_the_session(tmp_path: Path) -> None:
    model, _ = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    folder = Path(session._loaded.snapshot.folder)  # type: ignore[union-attr]
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == oct(0o700)
    del session
    import gc

    gc.collect()
    assert not folder.exists()


DROP_IN = """
import os, sys, json
import numpy as np
import onnxruntime as ort
from dmlshim.execute.weights import file_slices as weight_file
weight_file.WALK_MIN_GRAPH_BYTES = 0  # read this small model without its weights, as a large one is
path, how = sys.argv[1], sys.argv[2]
feeds = {
    "ids": np.array([5, 0, 511, 7], dtype=np.int64),
    "pos": np.array([[3], [1023], [0], [500]], dtype=np.int64),
}
s = ort.InferenceSession(path, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
first = [o.tolist() for o in s.run(None, feeds)]
size = os.path.getsize(path)
if how == "truncate":
    os.truncate(path, 100)
else:
    with open(path, "r+b") as f:
        f.seek(size // 4)
        f.write(b"\\0" * (size // 2))
second = [o.tolist() for o in s.run(None, feeds)]
own = s._loaded.snapshot is not None
print(json.dumps({"same": first == second, "providers": s.get_providers(), "weightless": own}))
"""


@pytest.mark.parametrize("how", ["edit", "truncate"])
def test_the_drop_in_keeps_its_weights(tmp_path: Path, how: str) -> None:
    model, _ = _model()
    model.graph.node[-1].name = "cast"
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path))
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(DROP_IN), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), "DMLSHIM_ORT_SUMMARY": "off"}
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", str(script), str(path), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr  # no SIGBUS (-7)
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same"] and result["providers"][0] == "DmlExecutionProvider"
    assert result["weightless"]


def _mapped_model(folder: Path, aligned: bool) -> tuple[Path, dict[str, tuple[int, np.ndarray]]]:
    """Small weights (1-4 KiB, under the 64 KiB from which dmlshim shares inline ones) in external data,
    each read by a different kind of node; offsets on 4096-byte pages (the alignment onnxruntime's docs
    give for mmap on Linux) or 8 bytes past them. Returns the model and each initializer's offset and
    value."""
    rng = np.random.default_rng(35)
    values = {
        "table": rng.standard_normal((64, 16)).astype(np.float32),  # Gather data (emulated)
        "weight": rng.standard_normal((16, 16)).astype(np.float32),  # MatMul B (onnxruntime prepacks)
        "bias": rng.standard_normal((16, 16)).astype(np.float32),  # Add (onnxruntime's kernel)
        "cache": rng.standard_normal((32, 16)).astype(np.float32),  # ScatterND data (emulated)
        "cols": rng.integers(0, 16, size=256).astype(np.int64),  # constant Gather indices (emulated)
    }
    nodes = [
        onnx.helper.make_node("Gather", ["table", "ids"], ["g"], axis=0, name="gather"),
        onnx.helper.make_node("MatMul", ["g", "weight"], ["mm"], name="matmul"),
        onnx.helper.make_node("Add", ["mm", "bias"], ["add"], name="add"),
        onnx.helper.make_node("ScatterND", ["cache", "pos", "g"], ["sc"], name="scatter"),
        onnx.helper.make_node("Gather", ["add", "cols"], ["picked"], axis=1, name="pick"),
    ]
    f, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    graph = onnx.helper.make_graph(
        nodes,
        "mapped",
        [
            onnx.helper.make_tensor_value_info("ids", i64, [16]),
            onnx.helper.make_tensor_value_info("pos", i64, [16, 1]),
        ],
        [onnx.helper.make_tensor_value_info(n, f, None) for n in ("sc", "picked")],
    )
    blob = bytearray()
    where: dict[str, tuple[int, np.ndarray]] = {}
    for name, value in values.items():
        blob += b"\0" * ((-len(blob)) % 4096 + (0 if aligned else 8))
        where[name] = (len(blob), value)
        tensor = onnx.numpy_helper.from_array(value, name)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, text in (("location", "w.bin"), ("offset", str(len(blob))), ("length", str(value.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, text
        graph.initializer.append(tensor)
        blob += value.tobytes()
    (folder / "w.bin").write_bytes(bytes(blob))
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=10)
    path = folder / "mapped.onnx"
    onnx.save(model, path)
    return path, where


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_small_external_weights_follow_onnxruntimes_mapping(
    tmp_path: Path, engine: str, aligned: bool
) -> None:
    # onnxruntime 1.32 and 1.24 map external data at any 4-byte offset: an edit to a weight a kernel reads
    # at run time shows in the next run (Gather, Add, ScatterND, constant indices), one copied at session
    # creation does not (MatMul's prepacked B). Each edit is asked of onnxruntime's own session.
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    path, where = _mapped_model(tmp_path, aligned)
    feeds = {"ids": np.arange(16, dtype=np.int64) % 5, "pos": np.arange(16, dtype=np.int64)[:, None] * 2}
    session = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    theirs = _ort_session(path)
    before = theirs.run(None, feeds)
    assert_same_bits(session.run(None, feeds), before)
    data = tmp_path / "w.bin"
    shown = {}
    for name in ("table", "weight", "bias", "cache", "cols"):
        offset, value = where[name]
        with open(data, "r+b") as f:
            f.seek(offset)
            f.write((value[::-1] if name == "cols" else value * 0 + 3).tobytes())
        expected = theirs.run(None, feeds)
        shown[name] = any(not np.array_equal(a, b) for a, b in zip(expected, before, strict=True))
        before = expected
        for _ in range(4):  # through the path trial: the whole-model check and the partitioned steps
            got = session.run(None, feeds)
            for g, e in zip(got, expected, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=name)
    assert shown == {"table": True, "weight": False, "bias": True, "cache": True, "cols": True}
    data.unlink()  # the mapped bytes stay
    assert_same_bits(session.run(None, feeds), theirs.run(None, feeds))


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_small_external_weights_cut_short_are_refused(tmp_path: Path, engine: str) -> None:
    # onnxruntime's own session dies of SIGBUS here (measured for issue 35: its process exits with -7)
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    path, _ = _mapped_model(tmp_path, aligned=True)
    feeds = {"ids": np.arange(16, dtype=np.int64) % 5, "pos": np.arange(16, dtype=np.int64)[:, None] * 2}
    session = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    session.run(None, feeds)
    os.truncate(tmp_path / "w.bin", 100)
    with pytest.raises(BadModelError, match="was cut to 100 bytes after the session was created"):
        session.run(None, feeds)
