"""Bad feeds and input files: missing or extra feeds, wrong dtype, shape or rank, values that are not arrays,
``.npz`` files holding pickled objects (refused without unpickling) or not being ``.npz`` at all."""

from __future__ import annotations

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
            ["(2, 7)", "dimension 1"],
        ),
        ({"input_ids": np.zeros(12, np.int64), "position_ids": IDS}, "input_ids", ["rank 2", "(12,)"]),
        ({"input_ids": np.int64(3), "position_ids": IDS}, "input_ids", ["rank 2"]),
        ({"input_ids": "abc", "position_ids": IDS}, "input_ids", ["int64"]),
        ({"input_ids": None, "position_ids": IDS}, "input_ids", ["int64"]),
        ({"input_ids": np.zeros((2, 6), object), "position_ids": IDS}, "input_ids", ["object"]),
        ({"input_ids": [[0.5] * 6] * 2, "position_ids": IDS}, "input_ids", ["float64"]),
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
        "inexact-list",
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
