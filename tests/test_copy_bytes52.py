"""``copy_bytes`` (lower's copy of external data) copies inside the kernel where it can, with the same bytes.

Lowering a 548 MB external-data Llama step spent 1.3 s of its 3 s reading and writing the weights through
Python (``cp`` of the same file: 0.4-0.8 s); ``os.copy_file_range`` now copies them, and a handle that
is not a file, or a platform without the call, still gets the read-and-write copy. The bytes expected
are the source file's own (read back with ``open``), holes of a sparse source included.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import dmlshim.fileio.onnx_pieces as pieces
from dmlshim.fileio.onnx_pieces import SourceBytes, copy_bytes, end_sparse

MIB = 1 << 20


def _source(path: Path) -> bytes:
    """3 MiB of data, a 2 MiB hole, 1 MiB of data and 5 bytes: a sparse file where the file system allows."""
    data = bytes(range(256)) * (3 * MIB // 256)
    tail = bytes(reversed(range(256))) * (MIB // 256) + b"tail!"
    with path.open("wb") as f:
        f.write(data)
        f.seek(2 * MIB, os.SEEK_CUR)
        f.write(tail)
    return path.read_bytes()


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "read_write"])
@pytest.mark.parametrize("offset, length", [(0, 6 * MIB + 5), (1000, 3 * MIB), (3 * MIB - 7, 3 * MIB + 12)])
def test_copy_bytes_gives_the_source_bytes(
    kernel: bool, offset: int, length: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "weights.data"
    whole = _source(src)
    calls: list[int] = []
    real = getattr(os, "copy_file_range", None)
    if not kernel or real is None:
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    else:

        def counting(*args: int) -> int:
            calls.append(args[2])
            return real(*args)

        monkeypatch.setattr(os, "copy_file_range", counting)
    out = tmp_path / "out.data"
    with out.open("wb") as handle:
        handle.write(b"head")  # the copy lands at the handle's position
        copy_bytes(handle, SourceBytes(str(src), offset, length))
        handle.write(b"end")
        end_sparse(handle)
    assert out.read_bytes() == b"head" + whole[offset : offset + length] + b"end"
    if kernel and real is not None:
        assert calls and sum(calls) <= length
    buffer = io.BytesIO()  # not a file: read and written
    copy_bytes(buffer, SourceBytes(str(src), offset, length))
    assert buffer.getvalue()[: buffer.tell()] == whole[offset : offset + length]


def test_a_failing_kernel_copy_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "weights.data"
    whole = _source(src)

    def refused(*args: int) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refused, raising=False)
    out = tmp_path / "out.data"
    with out.open("wb") as handle:
        copy_bytes(handle, SourceBytes(str(src), 0, len(whole)))
        end_sparse(handle)
    assert out.read_bytes() == whole
    assert pieces._kernel_copy(0, io.BytesIO(), 0, 10) == 0
