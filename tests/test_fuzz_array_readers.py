"""Every array source (.npz members, polygraphy JSON, replay's .npy files) goes through one hardened
``.npy`` header reader (``dmlshim.fileio.reading.npy_header``).

Properties: every array numpy writes, in every ``.npy`` format version, reads back equal to what numpy
itself loads; every malformed header and every malformed polygraphy structure ends in one dmlshim error
sentence (never another exception, never numpy's advice to pass ``allow_pickle=True``).
"""

from __future__ import annotations

import base64
import io
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmlshim.errors import DmlShimError
from dmlshim.fileio.npz import load_npz
from dmlshim.fileio.polygraphy_json import arrays_from_document
from dmlshim.fileio.reading import NpyHeaderError, npy_header, read_npy
from tests.fuzz_settings import FUZZ, assert_cli_error, run_cli

VERSIONS = [(1, 0), (2, 0), (3, 0)]
DTYPES = ["<f4", ">f8", "<i8", "|u1", "|b1", "<f2", "<c8", "<i2", "<U3", [("a", "<i4"), ("b", "<f4")]]

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def npy_bytes(array: np.ndarray, version: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def npz_bytes(members: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name + ".npy", data)
    buffer.seek(0)
    return buffer


def polygraphy_inputs(data: bytes) -> list[dict[str, Any]]:
    return [{"x": {"array": base64.b64encode(data).decode(), "polygraphy_class": "ndarray"}}]


def raw_header(text: str, version: tuple[int, int] = (1, 0), encoding: str = "latin1") -> bytes:
    header = text.encode(encoding)
    header += b" " * ((64 - (len(header) + 12 + 1) % 64) % 64) + b"\n"
    length = struct.pack("<H", len(header)) if version == (1, 0) else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_version_reads_as_numpy_loads_it(tmp_path: Path, version: tuple[int, int], dtype: Any) -> None:
    array = np.zeros((2, 3), dtype=np.dtype(dtype))
    array.view(np.uint8)[...] = np.arange(array.nbytes, dtype=np.uint8).reshape(array.view(np.uint8).shape)
    data = npy_bytes(array, version)
    want = np.load(io.BytesIO(data), allow_pickle=False)  # numpy is the authority
    stream = io.BytesIO(data)
    shape, fortran, got_dtype = npy_header(stream)
    assert (shape, fortran, got_dtype) == (want.shape, False, want.dtype)
    assert stream.tell() == len(data) - want.nbytes  # left at the data
    assert_same(load_npz(npz_bytes({"x": data}))["x"], want)
    assert_same(arrays_from_document(polygraphy_inputs(data), "in.json")["x"], want)
    (tmp_path / "x.npy").write_bytes(data)
    assert_same(read_npy(tmp_path / "x.npy"), want)


@FUZZ
@given(
    shape=shapes,
    dtype=st.sampled_from(["<f4", "<i8", "|u1", ">i4", "<f2"]),
    version=st.sampled_from(VERSIONS),
    fortran=st.booleans(),
)
def test_valid_arrays_round_trip(
    shape: tuple[int, ...], dtype: str, version: tuple[int, int], fortran: bool
) -> None:
    array = np.arange(int(np.prod(shape)), dtype=np.dtype(dtype)).reshape(
        shape, order="F" if fortran else "C"
    )
    if fortran:
        array = np.asfortranarray(array)
    data = npy_bytes(array, version)
    want = np.load(io.BytesIO(data), allow_pickle=False)
    assert npy_header(io.BytesIO(data))[0] == want.shape
    np.testing.assert_array_equal(load_npz(npz_bytes({"x": data}))["x"], want)
    np.testing.assert_array_equal(arrays_from_document(polygraphy_inputs(data), "in.json")["x"], want)


def _one_sentence(message: str) -> None:
    assert "\n" not in message
    assert "allow_pickle=True" not in message
    assert "Traceback" not in message


def _all_readers_refuse_or_read(data: bytes) -> None:
    """Every reader either reads ``data`` as numpy would, or raises one dmlshim error sentence."""
    try:
        shape, _, dtype = npy_header(io.BytesIO(data))
    except NpyHeaderError as exc:
        _one_sentence(str(exc))
    else:
        assert isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)
        assert isinstance(dtype, np.dtype)
    for read in (
        lambda: load_npz(npz_bytes({"x": data})),
        lambda: arrays_from_document(polygraphy_inputs(data), "in.json"),
    ):
        try:
            read()
        except DmlShimError as exc:
            _one_sentence(str(exc))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        path.write_bytes(data)
        try:
            read_npy(path)
        except DmlShimError as exc:
            _one_sentence(str(exc))


_descr = st.one_of(
    st.sampled_from(["<f4", "|O", "<U2", "", "xyz", "<f4<", "|V0", ">M8[s]"]),
    st.lists(st.tuples(st.text(max_size=3), st.sampled_from(["<i4", "|O", "q"])), max_size=2),
    st.integers(),
)
_shape_text = st.one_of(
    st.lists(st.integers(-(2**70), 2**70), max_size=4).map(lambda dims: repr(tuple(dims))),
    st.sampled_from(["(True, 4)", "(2.0,)", "[2, 3]", "'abc'", "(None,)", "((1,),)", "2", "()"]),
)


@FUZZ
@given(
    descr=_descr,
    fortran=st.sampled_from(["False", "True", "0", "'no'", "None"]),
    shape=_shape_text,
    extra=st.sampled_from(["", "'z': 1, "]),
    version=st.sampled_from([*VERSIONS, (0, 9), (4, 0)]),
    payload=st.binary(max_size=64),
)
def test_malformed_headers_end_in_one_sentence(
    descr: Any, fortran: str, shape: str, extra: str, version: tuple[int, int], payload: bytes
) -> None:
    text = f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {shape}, {extra}}}"
    _all_readers_refuse_or_read(
        raw_header(text, version, "utf-8" if version == (3, 0) else "latin1") + payload
    )


@FUZZ
@given(st.binary(max_size=120))
def test_random_bytes_end_in_one_sentence(data: bytes) -> None:
    _all_readers_refuse_or_read(b"\x93NUMPY" + data)


def test_the_named_hostile_headers() -> None:
    negative = raw_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }") + bytes(64)
    for data in (
        negative,
        raw_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }", (3, 0)),
    ):
        with pytest.raises(NpyHeaderError, match=r"shape \(-1, 4\)"):
            npy_header(io.BytesIO(data))
        with pytest.raises(DmlShimError, match=r"shape \(-1, 4\)"):
            arrays_from_document(polygraphy_inputs(data), "in.json")
        with pytest.raises(DmlShimError, match=r"shape \(-1, 4\)"):
            load_npz(npz_bytes({"x": data}))
    oversized = b"\x93NUMPY\x01\x00" + struct.pack("<H", 20000) + b"{" + b" " * 19998 + b"\n"
    for read in (
        lambda: load_npz(npz_bytes({"x": oversized})),
        lambda: arrays_from_document(polygraphy_inputs(oversized), "in.json"),
    ):
        with pytest.raises(DmlShimError) as info:
            read()
        assert "20000 bytes" in str(info.value) and "allow_pickle=True" not in str(info.value)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@FUZZ
@given(
    doc=st.one_of(
        st.builds(lambda runs: {"lst": runs}, st.lists(st.lists(_json, max_size=3), max_size=2)),
        st.builds(lambda runner, its: {"lst": [[runner, its]]}, _json, _json),
        st.builds(lambda out: {"lst": [["r", [{"outputs": out}]]]}, _json),
        st.builds(lambda feeds: [feeds], _json),
        _json,
    )
)
def test_polygraphy_structures_are_refused_cleanly(doc: Any) -> None:
    try:
        arrays = arrays_from_document(doc, "doc.json")
    except DmlShimError as exc:
        _one_sentence(str(exc))
    else:
        assert all(isinstance(a, np.ndarray) for a in arrays.values())


@pytest.mark.parametrize("doc", [{"lst": [["r", {"a": 1}]]}, {"lst": [["r", 5]]}])
def test_named_polygraphy_structures_exit_2(tmp_path: Path, doc: Any) -> None:
    import json

    import onnx

    from tests.test_initializer_overrides import override_model

    onnx.save(override_model(), str(tmp_path / "m.onnx"))
    (tmp_path / "ref.json").write_text(json.dumps(doc))
    result = run_cli("validate", tmp_path / "m.onnx", "--reference-outputs", tmp_path / "ref.json")
    assert_cli_error(result.code, result.err, "runner 'r'", "not a list of iterations")
