"""External data stored in the .onnx file itself, then the file changed after the session was built.

A model may name its own file as the external data's ``location``, the bytes past the protobuf (kept as
an unknown length-delimited field, which protobuf parsers skip, so the whole file still parses). To
onnxruntime this is external data like any other: its session maps the file (onnxruntime 1.32, at any
4-byte offset), so an edit in place shows in the next run where a kernel reads the weight at run time, a
replaced or deleted file keeps the old bytes, and a file cut short kills its process with SIGBUS (a
weight of 4 MB; a cut inside the last page reads zeros). dmlshim follows onnxruntime in every engine,
except that a file cut short is refused with an error instead of a crash (issue 35 leftover). Expected
values from onnxruntime's own session of the same file, asked after each change.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dmlshim
from dmlshim.errors import BadModelError
from tests.oracle import assert_same_bits, ort_run
from tests.test_file_changes_after_load import CHANGES, ENGINES, _ort_session
from tests.test_weightless_load import _model

FIELD_TAG = bytes([0xBA, 0x3E])  # field 999, wire type 2 (length-delimited): no field of ModelProto


def _varint5(n: int) -> bytes:
    """``n`` as a five-byte varint (its length then does not depend on its value)."""
    return bytes(((n >> (7 * k)) & 0x7F) | (0x80 if k < 4 else 0) for k in range(5))


def save_in_itself(
    model: onnx.ModelProto, path: Path, min_bytes: int = 1024, only: frozenset[str] | None = None
) -> dict[str, tuple[int, int]]:
    """Write ``model`` to ``path`` with each initializer of ``min_bytes`` or more (of those named
    ``only``, when given; the others stay inline) as external data in ``path`` itself, past the protobuf
    (64-byte aligned); the offset and length of each by name."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    big = [
        t for t in copy.graph.initializer if len(t.raw_data) >= min_bytes and (only is None or t.name in only)
    ]
    blobs = {t.name: bytes(t.raw_data) for t in big}
    where: dict[str, tuple[int, int]] = {}
    start = 0
    for _ in range(4):  # the offsets' digits change the protobuf's length: until it settles
        for t in big:
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
        where, at = {}, start
        for t in big:
            where[t.name] = (at, len(blobs[t.name]))
            for key, value in (
                ("location", path.name),
                ("offset", str(at)),
                ("length", str(len(blobs[t.name]))),
            ):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            at = (at + len(blobs[t.name]) + 63) // 64 * 64
        head = copy.SerializeToString()
        first = (len(head) + len(FIELD_TAG) + 5 + 63) // 64 * 64
        if first == start:
            break
        start = first
    end = max(o + n for o, n in where.values())
    payload = bytearray(end - len(head) - len(FIELD_TAG) - 5)
    base = len(head) + len(FIELD_TAG) + 5
    for name, (offset, length) in where.items():
        payload[offset - base : offset - base + length] = blobs[name]
    path.write_bytes(head + FIELD_TAG + _varint5(len(payload)) + bytes(payload))
    return where


def _change(path: Path, how: str, where: dict[str, tuple[int, int]]) -> None:
    if how == "edit":  # zeros over every weight's bytes
        with open(path, "r+b") as f:
            for offset, length in where.values():
                f.seek(offset)
                f.write(b"\0" * length)
    elif how == "truncate":  # inside the protobuf: every weight gone
        os.truncate(path, 100)
    elif how == "replace":
        other = path.with_name("other.tmp")
        other.write_bytes(b"\x7f" * path.stat().st_size)
        os.replace(other, path)
    else:
        path.unlink()


def test_the_file_is_one_onnxruntime_and_onnx_read(tmp_path: Path) -> None:
    model, feeds = _model()
    path = tmp_path / "model.onnx"
    where = save_in_itself(model, path)
    assert set(where) == {"table", "weight", "cols", "cache", "table16"}
    assert onnx.load(str(path)).graph.initializer[0].data_location == onnx.TensorProto.DEFAULT
    assert_same_bits(_ort_session(path).run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("how", CHANGES)
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_data_in_the_model_file_follows_onnxruntime_without_a_crash(
    tmp_path: Path, engine: str, how: str
) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    model, feeds = _model()
    path = tmp_path / "model.onnx"
    where = save_in_itself(model, path)
    session = dmlshim.InferenceSession(str(path), **ENGINES[engine])
    theirs = _ort_session(path)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    _change(path, how, where)
    if how == "truncate":  # onnxruntime's session would die of SIGBUS here: dmlshim refuses
        for _ in range(2):
            with pytest.raises(BadModelError, match="was cut to 100 bytes after the session was created"):
                session.run(None, feeds)
        return
    expected = theirs.run(None, feeds)  # what onnxruntime's session of the same file now gives
    if how == "edit":
        assert not np.array_equal(expected[1], ort_run(model, feeds)[1])  # the cache's edit shows
    for _ in range(4):  # through the path trial: the whole-model check and the partitioned steps
        got = session.run(None, feeds)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def _steps_only(folder: Path) -> dict[str, object]:
    """A session with profiling on at basic optimization: the partitioned steps answer every run (no
    whole-model check; beyond basic a profiled session keeps the check, docs/engines.md)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.enable_profiling = True
    so.profile_file_prefix = str(folder / "profile")
    return {"sess_options": so}


@pytest.mark.parametrize("how", ["edit", "truncate", "replace", "delete"])
def test_the_partitioned_steps_follow_onnxruntime(tmp_path: Path, how: str) -> None:
    model, feeds = _model()
    path = tmp_path / "model.onnx"
    where = save_in_itself(model, path, min_bytes=1)  # every weight, the 4-byte scale too
    session = dmlshim.InferenceSession(str(path), **_steps_only(tmp_path))
    theirs = _ort_session(path)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    assert session.last_run_record.path == "partitioned"
    for name in sorted(where) if how == "edit" else [None]:
        if name is None:
            _change(path, how, where)
        else:  # one weight at a time: each edit asked of onnxruntime's session
            offset, length = where[name]
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(np.full(length // 4, 3, np.float32).tobytes() if name != "cols" else b"\0" * length)
        if how == "truncate":
            with pytest.raises(BadModelError, match="was cut to 100 bytes after the session was created"):
                session.run(None, feeds)
            return
        expected = theirs.run(None, feeds)
        for _ in range(2):
            for g, e in zip(session.run(None, feeds), expected, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=str(name))


@pytest.mark.parametrize("engine", [*sorted(ENGINES), "steps"])
@pytest.mark.parametrize("part", ["everything", "protobuf"])
def test_inline_and_in_file_external_weights_together(
    tmp_path: Path, engine: str, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some weights inline (onnxruntime copies them: they never change), some external data in the same
    file (onnxruntime maps them: an edit shows); zeros over the whole file, or over the protobuf only."""
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    from dmlshim.execute.weights import file_slices

    monkeypatch.setattr(file_slices, "WALK_MIN_GRAPH_BYTES", 0)  # the weightless reader walks this file
    model, feeds = _model()
    path = tmp_path / "model.onnx"
    where = save_in_itself(model, path, only=frozenset({"table", "cache"}))
    options = _steps_only(tmp_path) if engine == "steps" else ENGINES[engine]
    session = dmlshim.InferenceSession(str(path), **options)
    theirs = _ort_session(path)
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    first = min(offset for offset, _ in where.values())
    start, length = (0, path.stat().st_size) if part == "everything" else (200, first - 400)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\0" * length)
    expected = theirs.run(None, feeds)
    for _ in range(4):
        for g, e in zip(session.run(None, feeds), expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
