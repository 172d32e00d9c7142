"""Round 49 (feedshapes49, item 2): an ``.npz`` of inputs over the memory limit is refused from its headers.

The brief measured ``dmlshim run --inputs big.npz`` (one 160 MB float32 array, ``DMLSHIM_MEMORY_LIMIT=
100000000``) peaking at 552 MB before its refusal. At this commit it peaks at the interpreter's own 83 MB
(``/usr/bin/time -v``, stored, deflated, Fortran-order and several-member archives alike): the reader
(``dmlshim.fileio.npz``) checks each member's ``.npy`` header, and all members together, before inflating
any data. This pins that down by counting what the reader takes from the file: the headers only.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.errors import TooLargeError
from dmlshim.fileio.files import write_npz
from dmlshim.fileio.npz import load_npz

LIMIT = 1_000_000
ARRAY = np.zeros((400, 1000), np.float32)  # 1.6 MB: over the limit, the file far larger than its headers


class _Counting(io.RawIOBase):
    """A seekable file that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)
        self.read_bytes = 0
        self.name = "counted.npz"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def readinto(self, buffer: Any) -> int:
        got = self._inner.readinto(buffer)
        self.read_bytes += got
        return got


def _archive(tmp_path: Path, compress: bool, arrays: dict[str, np.ndarray]) -> bytes:
    if compress:
        target = io.BytesIO()
        np.savez_compressed(target, **arrays)
        return target.getvalue()
    write_npz(tmp_path / "a.npz", arrays)
    return (tmp_path / "a.npz").read_bytes()


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("members", ["one", "together"])
def test_npz_over_the_limit_refused_from_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool, members: str
) -> None:
    arrays = {"d": ARRAY} if members == "one" else {f"a{k}": ARRAY[:100] for k in range(4)}
    data = _archive(tmp_path, compress, arrays)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    stream = _Counting(data)
    with pytest.raises(TooLargeError) as info:
        load_npz(io.BufferedReader(stream))  # type: ignore[arg-type]
    assert ("together" in str(info.value)) == (members == "together")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        directory = sum(len(i.filename) + 200 for i in archive.infolist())  # local and central headers
    # the zip directory, each member's header (and a buffer's worth of it) are read; no array data is
    assert stream.read_bytes < directory + 64 * 1024 * len(arrays) < ARRAY.nbytes, stream.read_bytes
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(ARRAY.nbytes + 4096))
    loaded = load_npz(io.BytesIO(data))
    assert all(np.array_equal(loaded[k], v) for k, v in arrays.items())
