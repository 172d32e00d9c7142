"""Fuzzers for the safety families of issue 12: mutated DxDispatch ``targetPath`` / ``sourcePath``,
declared-size bombs (replay ``sizeInBytes`` / ``valueCount``, external-data ``offset`` / ``length``), and
deep JSON nesting.

Every example must end with exit 0, or exit 2 and one ``dmlshim CMD: error:`` paragraph (no traceback);
nothing may appear outside the folders the command was given; a declared size above the memory limit must
be refused. Examples per property come from the profile in tests/fuzz_settings.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_settings import FUZZ, assert_cli_error, run_cli
from tests.test_errors_modelcheck import _external
from tests.test_replay import gather_elements_model

LIMIT = 1_000_000  # DMLSHIM_MEMORY_LIMIT for these properties: 1 MB keeps every accepted example small

# Path pieces that matter: separators of both systems, dots, NUL, drive letters, and ordinary names.
_PIECES = st.sampled_from(["..", ".", "", "a", "b.npy", "out", "\x00", "C:", "~", " ", "x.NPY", "\u00e9"])
_PATHS = st.one_of(
    st.lists(_PIECES, max_size=6).flatmap(
        lambda parts: st.sampled_from(["/", "\\"]).map(lambda sep: sep.join(parts))
    ),
    st.text(alphabet="./\\\x00:ab", max_size=12),
    st.text(max_size=8).map(lambda t: t + ".npy"),
)


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _ok_or_refused(code: int, err: str) -> None:
    if code != 0:
        assert_cli_error(code, err)


@FUZZ
@given(target=_PATHS)
def test_fuzz_target_path_never_leaves_the_output_folder(target: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "a" / "b"
        work.mkdir(parents=True)
        obj = gather_elements_model()
        obj["commands"][1]["targetPath"] = target
        model = work / "model.json"
        model.write_text(json.dumps(obj))
        r = run_cli("replay", model, "--output-path", work / "out")
        _ok_or_refused(r.code, r.err)
        created = _listing(root) - {"a", "a/b", "a/b/model.json"}
        assert all(p == "a/b/out" or p.startswith("a/b/out/") for p in created), (target, created)
        if r.code == 0:
            written = [p for p in created if (root / p).is_file()]
            assert len(written) == 1, created
            np.testing.assert_array_equal(
                np.load(root / written[0]), np.array([[4, 8, 3], [7, 2, 3]], np.float32)
            )


@FUZZ
@given(source=_PATHS)
def test_fuzz_source_path_reads_only_inside_the_model_folder(source: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "model"
        folder.mkdir()
        # The same values inside and outside: an accepted path must still be one inside the folder.
        values = np.arange(1, 10, dtype=np.float32)
        np.save(root / "outside.npy", values)
        np.save(folder / "inside.npy", values)
        (folder / "link.npy").symlink_to(root / "outside.npy")
        obj = gather_elements_model()
        obj["resources"]["input"] = {"initialValues": {"sourcePath": source}}
        model = folder / "model.json"
        model.write_text(json.dumps(obj))
        r = run_cli("replay", model, "--output-path", root / "out")
        _ok_or_refused(r.code, r.err)
        if r.code == 0:
            parts = [p for p in source.replace("\\", "/").split("/") if p not in ("", ".")]
            assert parts and ".." not in parts and not os.path.isabs(source), source
            resolved = os.path.realpath(folder.joinpath(*parts))
            assert resolved.startswith(os.path.realpath(folder) + os.sep), (source, resolved)


@FUZZ
@given(
    size=st.one_of(st.integers(0, 1 << 24), st.integers(0, (1 << 64) - 1)),
    key=st.sampled_from(["sizeInBytes", "valueCount"]),
)
def test_fuzz_declared_replay_sizes(size: int, key: str) -> None:
    obj = gather_elements_model()
    if key == "sizeInBytes":
        obj["resources"]["output"]["sizeInBytes"] = size
        need = size
    else:
        obj["resources"]["output"]["initialValues"] = {"valueCount": size, "value": 0}
        need = size * 4
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.json"
        model.write_text(json.dumps(obj))
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
            r = run_cli("replay", model, "--output-path", Path(tmp) / "out")
        _ok_or_refused(r.code, r.err)
        if need > LIMIT:
            # Refused: before allocating, or (valueCount above 2^32-1) as out of DxDispatch's range.
            assert r.code == 2, (size, key, r.err)
            assert "refusing before" in r.err or "expected an integer in" in r.err, r.err


_EXTENT = st.one_of(
    st.integers(-(1 << 70), 1 << 70).map(str),
    st.text(alphabet="0123456789-+ xe.", min_size=0, max_size=8),
    st.none(),
)


@FUZZ
@given(offset=_EXTENT, length=_EXTENT, rows=st.integers(0, 1 << 40))
def test_fuzz_external_data_entries(offset: str | None, length: str | None, rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _external(folder, offset=offset, length=length, dims=(rows, 3))
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
            r = run_cli("inspect", path)
        if r.code not in (0, 1):
            assert_cli_error(r.code, r.err, "'w'")
        if rows * 12 > LIMIT:
            assert r.code == 2, (offset, length, rows, r.err)


def _nest(depth: int, kind: str) -> Any:
    text = ("[" * depth + "]" * depth) if kind == "array" else ('{"a":' * depth + "1" + "}" * depth)
    return text


@FUZZ
@given(
    depth=st.integers(1, 200_000),
    kind=st.sampled_from(["array", "object"]),
    where=st.sampled_from(["model", "metadata", "index"]),
)
def test_fuzz_deep_nesting(depth: int, kind: str, where: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        nested = _nest(depth, kind)
        if where == "index":
            (folder / "index.json").write_text('{"exported": ' + nested + "}")
            r = run_cli("compare", folder)
        else:
            if where == "model":
                text = nested
            else:
                text = json.dumps(gather_elements_model())[:-1] + ', "provenance2": ' + nested + "}"
            (folder / "model.json").write_text(text)
            r = run_cli("replay", folder / "model.json", "--output-path", folder / "out")
        if r.code not in (0, 1):
            assert_cli_error(r.code, r.err)
        if depth > 5000:
            assert r.code == 2 and "too deeply" in r.err, (depth, kind, where, r.err)
