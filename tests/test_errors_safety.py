"""No data lost or touched: NaN/Inf/-0.0 bit patterns pass through untouched, caller arrays are never
modified (scatter included), and ``run --output`` / ``export`` never write outside the path they are given
nor overwrite without ``--overwrite``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from dmlshim import InferenceSession
from dmlshim.kernels import execute
from dmlshim.translate import TensorInfo, run_translation, translate_node
from tests.fuzz_settings import assert_cli_error, one_node_model, opset_for, run_cli
from tests.test_kernels_support import gather_desc, scatter_nd_desc

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "onnx_models" / "embedding_gather.onnx"
MODEL_INPUTS = REPO / "onnx_models" / "embedding_gather.npz"

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def special_values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Floats whose bits matter: quiet and signalling NaNs with payloads, +-Inf, +-0.0, subnormals."""
    dt = np.dtype(dtype)
    bits = _UINT[dt.itemsize]
    width = dt.itemsize * 8
    mant = {16: 10, 32: 23, 64: 52}[width]
    exp_all = ((1 << (width - 1 - mant)) - 1) << mant
    sign = 1 << (width - 1)
    patterns = [
        exp_all | (1 << (mant - 1)) | 0x5,  # quiet NaN, payload 5
        exp_all | 0x3,  # signalling NaN, payload 3
        sign | exp_all | (1 << (mant - 1)) | 0x2A,  # negative quiet NaN with payload
        exp_all,  # +Inf
        sign | exp_all,  # -Inf
        0,  # +0.0
        sign,  # -0.0
        1,  # smallest subnormal
        sign | 1,
    ]
    n = int(np.prod(shape))
    flat = np.array([patterns[k % len(patterns)] for k in range(n)], dtype=bits)
    return flat.view(dt).reshape(shape)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(_UINT[a.dtype.itemsize])


FLOATS = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", FLOATS, ids=["f16", "f32", "f64"])
@pytest.mark.parametrize("level", ["5_0", "3_0", "2_1"])
def test_special_floats_pass_through_every_op(dtype: type, level: str) -> None:
    data = special_values(np.dtype(dtype), (3, 6))
    updates_src = special_values(np.dtype(dtype), (6, 3)).T.copy()[::-1]  # other patterns, other order
    cases: list[tuple[str, dict[str, Any], dict[str, np.ndarray], np.ndarray]] = []
    cols = np.array([5, 0, 3, 1])
    cases.append(("Gather", {"axis": 1}, {"data": data, "indices": cols}, data[:, cols]))
    rows = np.array([[2, 0, 1, 1, 0, 2], [0, 0, 2, 2, 1, 1]])
    cases.append(
        ("GatherElements", {"axis": 0}, {"data": data, "indices": rows}, np.take_along_axis(data, rows, 0))
    )
    nd = np.array([[1, 5], [0, 0], [2, 3]])
    cases.append(("GatherND", {}, {"data": data, "indices": nd}, data[nd[:, 0], nd[:, 1]]))
    # Permutation rows: every column gets each row exactly once, so no duplicates.
    perm = np.array([[2, 0, 1, 1, 0, 2], [0, 1, 2, 0, 2, 1], [1, 2, 0, 2, 1, 0]])
    scattered = data.copy()
    for r in range(3):
        for c in range(6):
            scattered[perm[r, c], c] = updates_src[r, c]
    elements_feeds = {"data": data, "indices": perm, "updates": updates_src}
    cases.append(("ScatterElements", {"axis": 0}, elements_feeds, scattered))
    cases.append(("Scatter", {"axis": 0}, elements_feeds, scattered))
    nd_rows = np.array([[2], [0]])
    nd_updates = updates_src[:2]
    nd_expected = data.copy()
    nd_expected[[2, 0]] = nd_updates
    cases.append(("ScatterND", {}, {"data": data, "indices": nd_rows, "updates": nd_updates}, nd_expected))
    for op, attrs, feeds, expected in cases:
        model = one_node_model(op, feeds, attrs, opset_for(op), name="bits")
        got = InferenceSession(model, feature_level=level).run(None, feeds)[0]
        assert got.dtype == expected.dtype and got.shape == expected.shape, op
        assert np.array_equal(bits(got), bits(expected)), (op, level, bits(got), bits(expected))


def _variants(a: np.ndarray) -> dict[str, np.ndarray]:
    readonly = a.copy()
    readonly.flags.writeable = False
    fortran = np.asfortranarray(a)
    padded = np.zeros((*a.shape[:-1], a.shape[-1] * 2), a.dtype) if a.ndim else a.copy()
    if a.ndim:
        padded[..., ::2] = a
        strided = padded[..., ::2]
    else:
        strided = padded
    return {"writeable": a.copy(), "readonly": readonly, "fortran": fortran, "strided": strided}


MUTATION_CASES: dict[str, tuple[str, dict[str, Any], dict[str, np.ndarray]]] = {
    "gather": (
        "Gather",
        {"axis": 0},
        {"data": np.arange(12.0).reshape(3, 4), "indices": np.array([[2, -1]])},
    ),
    "gather_elements": (
        "GatherElements",
        {"axis": 1},
        {"data": np.arange(12.0).reshape(3, 4), "indices": np.array([[3, 0], [1, -1], [2, 2]])},
    ),
    "gather_nd": ("GatherND", {}, {"data": np.arange(12.0).reshape(3, 4), "indices": np.array([[1, -2]])}),
    "scatter": (
        "Scatter",
        {"axis": 1},
        {
            "data": np.arange(12.0).reshape(3, 4),
            "indices": np.array([[3, 0], [1, -1], [2, 2]]),
            "updates": -np.arange(6.0).reshape(3, 2),
        },
    ),
    "scatter_elements": (
        "ScatterElements",
        {"axis": 0},
        {
            "data": np.arange(12.0).reshape(3, 4),
            "indices": np.array([[2, 0, 1, -1]]),
            "updates": -np.arange(4.0).reshape(1, 4),
        },
    ),
    "scatter_nd": (
        "ScatterND",
        {},
        {
            "data": np.arange(12.0).reshape(3, 4),
            "indices": np.array([[1], [1], [-1]]),  # duplicates too
            "updates": -np.arange(12.0).reshape(3, 4),
        },
    ),
    "scatter_nd_add": (
        "ScatterND",
        {"reduction": "add"},
        {
            "data": np.arange(12.0).reshape(3, 4),
            "indices": np.array([[1], [1]]),
            "updates": -np.ones((2, 4)),
        },
    ),
}


@pytest.mark.parametrize("variant", ["writeable", "readonly", "fortran", "strided"])
@pytest.mark.parametrize("case", list(MUTATION_CASES))
@pytest.mark.parametrize("level", ["5_0", "2_1"])
def test_caller_arrays_never_modified(case: str, variant: str, level: str) -> None:
    op, attrs, base = MUTATION_CASES[case]
    opset = 16 if "reduction" in attrs else opset_for(op)
    feeds = {k: _variants(v)[variant] for k, v in base.items()}
    before = {k: (v.copy(), v.flags.writeable, v.flags.c_contiguous) for k, v in feeds.items()}
    model = one_node_model(op, {k: np.ascontiguousarray(v) for k, v in feeds.items()}, attrs, opset, name="m")
    session = InferenceSession(model, feature_level=level)
    out = session.run(None, feeds)[0]
    out2 = session.run(None, feeds)[0]
    for k, v in feeds.items():
        copy, writeable, contiguous = before[k]
        assert np.array_equal(v, copy), k
        assert v.flags.writeable == writeable and v.flags.c_contiguous == contiguous, k
    np.testing.assert_array_equal(out, out2)
    assert not any(np.shares_memory(out, v) for v in feeds.values())
    out[...] = 0  # writing to an output must not reach an input
    for k, v in feeds.items():
        assert np.array_equal(v, before[k][0]), k


def test_run_translation_and_kernels_do_not_modify_inputs() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([[1], [1], [-3]])
    updates = np.full((3, 4), -1, np.float32)
    arrays = [data, indices, updates]
    copies = [a.copy() for a in arrays]
    node = onnx.helper.make_node("ScatterND", ["d", "i", "u"], ["y"])
    infos = [TensorInfo(a.shape, onnx.helper.np_dtype_to_tensor_dtype(a.dtype)) for a in arrays]
    for level in ("5_0", "2_1", "1_0"):
        from dmlshim.dml import FeatureLevel

        t = translate_node(node, 13, infos, FeatureLevel.parse(level))
        if t.operator is not None:
            run_translation(t, arrays)
        for a, c in zip(arrays, copies, strict=True):
            assert np.array_equal(a, c)
    desc = scatter_nd_desc(data, indices.astype(np.uint32) % 3)
    bound = {
        "InputTensor": data,
        "IndicesTensor": (indices.astype(np.int64) % 3).astype(np.uint32),
        "UpdatesTensor": updates,
    }
    frozen = {k: v.copy() for k, v in bound.items()}
    execute(desc, bound)
    assert all(np.array_equal(bound[k], frozen[k]) for k in bound)
    gdesc = gather_desc(data, np.array([0, 2], np.uint32), 1)
    execute(gdesc, {"InputTensor": data, "IndicesTensor": np.array([0, 2], np.uint32).reshape(1, 2)})
    assert np.array_equal(data, copies[0])


# --- run --output --------------------------------------------------------------------------------------


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_run_output_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    out.write_bytes(b"precious")
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", out)
    assert_cli_error(r.code, r.err, str(out), "--overwrite")
    assert out.read_bytes() == b"precious"
    assert _listing(tmp_path) == {"out.npz"}


def test_run_output_overwrite_replaces_only_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    out.write_bytes(b"old")
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", out, "--overwrite")
    assert r.code == 0, r.err
    assert set(np.load(out).files) == {"embeddings"}
    assert _listing(tmp_path) == {"out.npz"}


def test_run_output_new_file(tmp_path: Path) -> None:
    out = tmp_path / "new.npz"
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "-o", out)
    assert r.code == 0, r.err
    assert _listing(tmp_path) == {"new.npz"}


def test_run_output_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim.txt"
    target.write_bytes(b"do not touch")
    work = tmp_path / "work"
    work.mkdir()
    link = work / "out.npz"
    os.symlink(target, link)
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", link)
    assert_cli_error(r.code, r.err, "--overwrite")
    assert target.read_bytes() == b"do not touch"
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", link, "--overwrite")
    assert r.code == 0, r.err
    assert target.read_bytes() == b"do not touch"  # the link was replaced, not written through
    assert not link.is_symlink() and set(np.load(link).files) == {"embeddings"}
    dangling = work / "dangling.npz"
    os.symlink(outside / "absent.npz", dangling)
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", dangling)
    assert_cli_error(r.code, r.err, "--overwrite")
    assert not (outside / "absent.npz").exists()


@pytest.mark.parametrize("kind", ["directory", "missing-folder"])
def test_run_output_bad_path_refused_before_running(tmp_path: Path, kind: str) -> None:
    out = tmp_path if kind == "directory" else tmp_path / "no" / "such" / "out.npz"
    before = _listing(tmp_path)
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", out, "--overwrite")
    assert_cli_error(r.code, r.err, str(out))
    assert _listing(tmp_path) == before


def test_failed_run_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    ids = np.full((2, 6), 10**6, np.int64)  # out of range for the embedding table
    np.savez(bad, input_ids=ids, position_ids=ids)
    out = tmp_path / "out.npz"
    r = run_cli("run", MODEL, "--inputs", bad, "--output", out)
    assert r.code == 2
    assert _listing(tmp_path) == {"bad.npz"}
    out.write_bytes(b"keep")
    r = run_cli("run", MODEL, "--inputs", bad, "--output", out, "--overwrite")
    assert r.code == 2 and out.read_bytes() == b"keep"


def test_run_write_failure_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.fileio import npz

    def broken(handle: Any, arrays: Any) -> None:
        handle.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(npz, "save_npz", broken)
    out = tmp_path / "out.npz"
    out.write_bytes(b"keep")
    r = run_cli("run", MODEL, "--inputs", MODEL_INPUTS, "--output", out, "--overwrite")
    assert_cli_error(r.code, r.err, str(out), "No space left")
    assert out.read_bytes() == b"keep"
    assert _listing(tmp_path) == {"out.npz"}


# --- export -----------------------------------------------------------------------------------------------


def test_export_refuses_non_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "export"
    target.mkdir()
    (target / "mine.txt").write_bytes(b"keep")
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS)
    assert_cli_error(r.code, r.err, str(target), "--overwrite")
    assert _listing(target) == {"mine.txt"}


def test_export_writes_only_inside_its_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "sibling.txt").write_bytes(b"keep")
    target = work / "export"
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS)
    assert r.code == 0, r.err
    assert _listing(work) - {"export"} == {p for p in _listing(work) if p.startswith("export/")}
    assert _listing(tmp_path) - {"work"} - {f"work/{p}" for p in _listing(work)} == {"sibling.txt"}
    # A second export over the first: refused without --overwrite, nothing foreign removed with it.
    (target / "notes.txt").write_bytes(b"mine")
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS)
    assert r.code == 2
    r = run_cli("export", MODEL, "-o", target, "--inputs", MODEL_INPUTS, "--overwrite")
    assert r.code == 0, r.err
    assert (target / "notes.txt").read_bytes() == b"mine"
