"""Bad feeds and input files: missing or extra feeds, wrong dtype, shape or rank, values that are not arrays,
``.npz`` files holding pickled objects (refused without unpickling) or not being ``.npz`` at all."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim import BadInputError, InferenceSession
from dmlshim.execute.feeds import load_npz
from tests.fuzz_settings import assert_cli_error, run_cli

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "onnx_models" / "embedding_gather.onnx"  # inputs input_ids, position_ids: int64 [2, 6]
IDS = np.zeros((2, 6), np.int64)


@pytest.fixture(scope="module")
def session() -> InferenceSession:
    return InferenceSession(MODEL)


@pytest.mark.parametrize(
    ("feeds", "tensor", "needles"),
    [
        ({"input_ids": IDS}, "position_ids", ["missing feed", "position_ids"]),
        ({}, "input_ids", ["missing feed"]),
        ({"input_ids": IDS, "position_ids": IDS, "bogus": IDS}, "bogus", ["not an input", "bogus"]),
        ({"input_ids": IDS.astype(np.int32), "position_ids": IDS}, "input_ids", ["int64", "int32"]),
        ({"input_ids": IDS.astype(np.float64), "position_ids": IDS}, "input_ids", ["int64", "float64"]),
        (
            {"input_ids": np.zeros((2, 7), np.int64), "position_ids": IDS},
            "input_ids",
            ["(2, 7)", "index: 1 Got: 7 Expected: 6"],
        ),
        (
            {"input_ids": np.zeros(12, np.int64), "position_ids": IDS},
            "input_ids",
            ["Invalid rank for input: input_ids Got: 1 Expected: 2", "(12,)"],
        ),
        # onnxruntime's run refuses a numpy scalar (RuntimeError): so does dmlshim, saying what to feed
        ({"input_ids": np.int64(3), "position_ids": IDS}, "input_ids", ["numpy.int64", "numpy.asarray"]),
        ({"input_ids": "abc", "position_ids": IDS}, "input_ids", ["int64"]),
        ({"input_ids": None, "position_ids": IDS}, "input_ids", ["int64"]),
        ({"input_ids": np.zeros((2, 6), object), "position_ids": IDS}, "input_ids", ["object"]),
    ],
    ids=[
        "missing",
        "none-fed",
        "extra",
        "int32-for-int64",
        "float-for-int",
        "wrong-dim",
        "wrong-rank",
        "scalar",
        "string",
        "none",
        "object-array",
    ],
)
def test_bad_feeds(session: InferenceSession, feeds: dict[str, Any], tensor: str, needles: list[str]) -> None:
    with pytest.raises(BadInputError) as info:
        session.run(None, feeds)
    assert info.value.tensor == tensor
    text = str(info.value)
    for needle in needles:
        assert needle in text, (needle, text)


def test_exact_python_lists_are_accepted(session: InferenceSession) -> None:
    out = session.run(None, {"input_ids": IDS.tolist(), "position_ids": IDS})[0]
    want = session.run(None, {"input_ids": IDS, "position_ids": IDS})[0]
    np.testing.assert_array_equal(out, want)


def test_lists_convert_as_onnxruntime_converts(session: InferenceSession) -> None:
    import onnxruntime

    feeds = {"input_ids": [[0.5] * 6] * 2, "position_ids": IDS}  # floats into int64: onnxruntime truncates
    want = onnxruntime.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(session.run(None, feeds)[0], want)


@pytest.mark.parametrize("feeds", [[IDS, IDS], None, "input_ids"])
def test_feed_not_a_mapping(session: InferenceSession, feeds: Any) -> None:
    with pytest.raises(BadInputError, match="mapping"):
        session.run(None, feeds)


def test_unknown_output_name(session: InferenceSession) -> None:
    with pytest.raises(BadInputError) as info:
        session.run(["nope"], {"input_ids": IDS, "position_ids": IDS})
    assert info.value.tensor == "nope"


def test_cli_run_missing_and_mismatched_feeds(tmp_path: Path) -> None:
    missing = tmp_path / "missing.npz"
    np.savez(missing, input_ids=IDS)
    r = run_cli("run", MODEL, "--inputs", missing)
    assert_cli_error(r.code, r.err, "position_ids", "missing feed")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, input_ids=IDS.astype(np.float32), position_ids=IDS)
    r = run_cli("run", MODEL, "--inputs", wrong)
    assert_cli_error(r.code, r.err, "input_ids", "float32")
    extra = tmp_path / "extra.npz"
    np.savez(extra, input_ids=IDS, position_ids=IDS, surplus=IDS)
    for command in ("run", "validate"):
        r = run_cli(command, MODEL, "--inputs", extra)
        assert_cli_error(r.code, r.err, "surplus")


class _Marker:
    """Unpickling this object would create a file: proof that nothing was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


@pytest.fixture
def pickled_npz(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "UNPICKLED"
    payload = np.empty(2, dtype=object)
    payload[0] = _Marker(marker)
    payload[1] = None
    path = tmp_path / "pickled.npz"
    np.savez(path, input_ids=payload, position_ids=IDS)
    return path, marker


def test_pickled_npz_refused_by_load_npz(pickled_npz: tuple[Path, Path]) -> None:
    path, marker = pickled_npz
    with pytest.raises(BadInputError) as info:
        load_npz(path)
    assert info.value.tensor == "input_ids"
    assert info.value.path == str(path)
    assert "allow_pickle=False" in str(info.value)
    with path.open("rb") as handle, pytest.raises(BadInputError):
        load_npz(handle)
    assert not marker.exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_pickled_npz_refused_by_cli(pickled_npz: tuple[Path, Path], command: str) -> None:
    path, marker = pickled_npz
    r = run_cli(command, MODEL, "--inputs", path)
    assert_cli_error(r.code, r.err, str(path), "input_ids", "pickl")
    assert not marker.exists()


def test_pickle_file_renamed_npz(tmp_path: Path) -> None:
    marker = tmp_path / "UNPICKLED"
    path = tmp_path / "raw.npz"
    path.write_bytes(pickle.dumps(_Marker(marker)))
    with pytest.raises(BadInputError):
        load_npz(path)
    r = run_cli("run", MODEL, "--inputs", path)
    assert_cli_error(r.code, r.err, str(path))
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["npy", "text", "empty", "damaged-zip", "directory"])
def test_npz_that_is_not_npz(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "inputs.npz"
    if kind == "npy":
        with path.open("wb") as handle:
            np.save(handle, IDS)
    elif kind == "text":
        path.write_text("input_ids = 1\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "damaged-zip":
        np.savez(path, input_ids=IDS, position_ids=IDS)
        data = bytearray(path.read_bytes())
        data[60:120] = b"\xff" * 60
        path.write_bytes(bytes(data))
    else:
        path.mkdir()
    with pytest.raises(BadInputError):
        load_npz(path)
    r = run_cli("run", MODEL, "--inputs", path)
    assert_cli_error(r.code, r.err)


def test_npz_member_not_npy(tmp_path: Path) -> None:
    path = tmp_path / "odd.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("input_ids.npy", b"not an npy header")
    with pytest.raises(BadInputError):
        load_npz(path)


def _npz_bomb(path: Path, shape: tuple[int, ...] = (2**28, 4), descr: str = "<f4") -> None:
    """A ~4 MB .npz whose one member inflates to the full declared array (zeros, valid CRC).

    The deflate stream is one compressed 16 MiB block of zeros repeated (each ends in a full flush, so
    the copies are independent), which makes a 4 GiB member in about two seconds.
    """
    import zlib

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    total = int(np.prod(shape)) * np.dtype(descr).itemsize
    chunk = bytes(1 << 24)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(header.getvalue()) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    tail = co.flush(zlib.Z_FINISH)

    class Repeat:
        def __init__(self) -> None:
            self.started = False

        def compress(self, data: bytes) -> bytes:
            if not self.started:
                self.started = True
                return first
            return block

        def flush(self) -> bytes:
            return tail

    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        zf.open("input_ids.npy", "w", force_zip64=True) as member,
    ):
        member._compressor = Repeat()  # type: ignore[attr-defined]
        member.write(header.getvalue())
        for _ in range(total // len(chunk)):
            member.write(chunk)


def test_npz_bomb_refused_from_its_header_with_small_peak_memory(tmp_path: Path) -> None:
    """The attack from the safety review: 4 MB on disk, (2**28, 4) float32 = 4 GiB once inflated."""
    import os
    import subprocess
    import sys

    bomb = tmp_path / "bomb.npz"
    _npz_bomb(bomb)
    assert bomb.stat().st_size < 8 * 2**20
    with zipfile.ZipFile(bomb) as zf, zf.open("input_ids.npy") as member:
        assert np.lib.format.read_magic(member) == (1, 0)
        assert np.lib.format.read_array_header_1_0(member)[0] == (2**28, 4)
    limit = 100_000_000
    # VmHWM, the child's own peak: ru_maxrss would carry this (large) test process's peak across exec.
    script = (
        "import sys\n"
        "from dmlshim.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print('MAXRSS_KB', hwm, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "DMLSHIM_MEMORY_LIMIT": str(limit), "PYTHONPATH": str(REPO / "provider")}
    for command in ("run", "validate"):
        proc = subprocess.run(
            [sys.executable, "-c", script, command, str(MODEL), "--inputs", str(bomb)],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert (
            "input_ids" in proc.stderr
            and "[268435456, 4]" in proc.stderr
            and "refusing before allocating" in proc.stderr
        )
        peak = int(proc.stderr.split("MAXRSS_KB")[1].split()[0]) * 1024
        assert peak < limit + 300 * 2**20, peak


def test_npz_members_checked_together_and_truncation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.errors import TooLargeError

    path = tmp_path / "two.npz"
    np.savez(path, a=np.zeros(600, np.float64), b=np.zeros(600, np.float64))  # 4800 bytes each
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "8000")
    with pytest.raises(TooLargeError) as info:
        load_npz(path)
    assert "together" in str(info.value)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "10000")
    assert load_npz(path)["a"].shape == (600,)
    monkeypatch.delenv("DMLSHIM_MEMORY_LIMIT")
    short = tmp_path / "short.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (2, 6)})
    with zipfile.ZipFile(short, "w") as zf:
        zf.writestr("input_ids.npy", header.getvalue() + b"\0" * 16)
    with pytest.raises(BadInputError) as info2:
        load_npz(short)
    assert info2.value.tensor == "input_ids" and "truncated" in str(info2.value)


def test_npz_variants_still_load(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    fortran = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    np.savez_compressed(path, f=fortran, empty=np.zeros((0, 3), np.float32), scalar=np.float16(1.5))
    loaded = load_npz(path)
    np.testing.assert_array_equal(loaded["f"], fortran)
    assert loaded["empty"].shape == (0, 3) and loaded["scalar"].shape == () and loaded["scalar"] == 1.5


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("onnx", "is an ONNX model, not an .npz of inputs"),
        ("onnx-renamed", "is an ONNX model, not an .npz of inputs"),
        ("json", "not polygraphy's inputs format"),
        ("json-bad-npy", "not an .npy array"),
        ("npy", "single .npy array"),
        ("text", "is text, not an .npz"),
        ("pickle", "pickle"),
        ("fifo", "not a regular file"),
    ],
)
def test_inputs_file_of_another_type(tmp_path: Path, kind: str, needle: str) -> None:
    import os

    path = tmp_path / ("inputs.onnx" if kind == "onnx" else "inputs.npz")
    if kind in ("onnx", "onnx-renamed"):
        path.write_bytes(MODEL.read_bytes())
    elif kind == "json":
        path.write_text('{"input_ids": [[1, 2]], "position_ids": [[0, 1]]}')
    elif kind == "json-bad-npy":  # base64 of the .npy magic alone: no header
        path.write_text('[{"input_ids": {"array": "k05VTVBZ", "polygraphy_class": "ndarray"}}]')
    elif kind == "npy":
        np.save(path.open("wb"), IDS)
    elif kind == "text":
        path.write_text("input_ids,position_ids\n1,2\n")
    elif kind == "pickle":
        path.write_bytes(pickle.dumps({"input_ids": [1, 2]}))
    else:
        os.mkfifo(path)
    for command in ("run", "validate"):
        r = run_cli(command, MODEL, "--inputs", path)
        assert_cli_error(r.code, r.err, needle, str(path))
    r = run_cli("export", MODEL, "-o", tmp_path / "out", "--inputs", path, "--json")
    assert_cli_error(r.code, r.err, needle)
    assert needle in json.loads(r.out)["error"]["message"]


def _polygraphy_json(feeds: list[dict[str, np.ndarray]]) -> str:
    """polygraphy's ``--save-inputs`` format: a list of feeds, each array as base64 of its .npy bytes."""
    import base64

    def encode(array: np.ndarray) -> dict[str, str]:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}

    return json.dumps([{name: encode(a) for name, a in feed.items()} for feed in feeds], indent=4)


def test_polygraphy_json_inputs(tmp_path: Path) -> None:
    ids = np.arange(12, dtype=np.int64).reshape(2, 6) % 5
    pos = np.tile(np.arange(6, dtype=np.int64), (2, 1))
    path = tmp_path / "inputs.json"
    path.write_text(_polygraphy_json([{"input_ids": ids, "position_ids": pos}, {"input_ids": ids * 0}]))
    loaded = load_npz(path)
    np.testing.assert_array_equal(loaded["input_ids"], ids)  # the first of the two iterations
    np.testing.assert_array_equal(loaded["position_ids"], pos)
    npz = tmp_path / "same.npz"
    np.savez(npz, input_ids=ids, position_ids=pos)
    out_json, out_npz = tmp_path / "a.npz", tmp_path / "b.npz"
    assert run_cli("run", MODEL, "--inputs", path, "-o", out_json).code == 0
    assert run_cli("run", MODEL, "--inputs", npz, "-o", out_npz).code == 0
    a, b = load_npz(out_json), load_npz(out_npz)
    for k in b:
        np.testing.assert_array_equal(a[k], b[k])
    r = run_cli("validate", MODEL, "--inputs", path)
    assert r.code == 0, r.err


def test_json_inputs_nested_deeper_than_python_parses(tmp_path: Path) -> None:
    """Nesting deeper than Python's JSON parser reaches is named as such, as --reference-outputs does."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    with pytest.raises(BadInputError, match="nests arrays or objects too deeply") as info:
        load_npz(path)
    assert "maximum recursion depth" not in str(info.value)
    r = run_cli("validate", MODEL, "--inputs", path)
    assert_cli_error(r.code, r.err, "nests arrays or objects too deeply")
