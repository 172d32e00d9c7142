"""Hostile pass h7 (issue 35), commands and the file writer: output paths that name a folder, folders that
are files, hostile member names in an --inputs archive. The commands run in child processes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from .oracle import IR_VERSION, ort_run

REPO = Path(__file__).resolve().parents[1]


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dmlshim", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
        "h7",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", d=np.arange(12, dtype=np.float32).reshape(3, 4), i=np.array([2, -1]))
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ["run", "m.onnx", "--inputs", "in.npz", "-o", "out/"],
        ["lower", "m.onnx", "-o", "out/"],
        ["inspect", "m.onnx", "--html", "out/"],
        ["validate", "m.onnx", "--inputs", "in.npz", "--save-outputs", "out/"],
        ["validate", "m.onnx", "--inputs", "in.npz", "--save-inputs", "out/"],
    ],
)
def test_an_output_file_ending_in_a_separator_is_refused(args: list[str], folder: Path) -> None:
    """``-o out/`` names a folder (open() refuses it: IsADirectoryError); run and lower wrote a file named
    ``out`` and reported success."""
    done = _cli([*args, "-q"], folder)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ends with '/', which names a folder" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (folder / "out").exists()


def test_an_output_file_under_a_regular_file_says_so(folder: Path) -> None:
    """The message said the folder 'does not exist' when it exists as a file."""
    (folder / "afile").write_bytes(b"keep")
    done = _cli(["run", "m.onnx", "--inputs", "in.npz", "-o", "afile/x.npz", "-q"], folder)
    assert done.returncode == 2
    assert "folder 'afile' is not a folder" in done.stderr
    assert (folder / "afile").read_bytes() == b"keep"


def _npz(path: Path, members: list[tuple[str, np.ndarray]]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in members:
            data = io.BytesIO()
            np.save(data, array)
            archive.writestr(name, data.getvalue())


@pytest.mark.parametrize("name", ["../../escape.npy", "/abs.npy", "sub/i.npy", "i.npy.npy"])
def test_inputs_members_with_path_names_are_no_feed_and_nothing_is_written(name: str, folder: Path) -> None:
    """A member named like a path is refused as onnxruntime refuses a feed of no input's name; nothing is
    extracted anywhere."""
    d = np.arange(12, dtype=np.float32).reshape(3, 4)
    _npz(folder / "evil.npz", [(name, np.zeros(2)), ("d.npy", d), ("i.npy", np.array([2, -1]))])
    done = _cli(["run", "m.onnx", "--inputs", "evil.npz", "-q"], folder)
    assert done.returncode == 2 and "is not an input of the model" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (folder.parent.parent / "escape.npy").exists() and not Path("/abs.npy").exists()


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_inputs_with_a_member_twice_take_numpys_choice(folder: Path) -> None:
    """numpy.load reads the last of two members of one name; run reads the same values."""
    d = np.arange(12, dtype=np.float32).reshape(3, 4)
    _npz(folder / "dup.npz", [("i.npy", np.array([0, 0])), ("d.npy", d), ("i.npy", np.array([2, -1]))])
    with np.load(folder / "dup.npz") as loaded:
        feeds = {"d": loaded["d"], "i": loaded["i"]}
    done = _cli(["run", "m.onnx", "--inputs", "dup.npz", "-o", "o.npz", "-q"], folder)
    assert done.returncode == 0, done.stderr
    want = ort_run(onnx.load(folder / "m.onnx"), feeds)[0]
    with np.load(folder / "o.npz") as got:
        np.testing.assert_array_equal(got["o"], want)


def _symbolic_gather(folder: Path, data: list, indices: list) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["o"], name="g")],
        "h7",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, data),
            helper.make_tensor_value_info("i", TensorProto.INT64, indices),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    path = folder / f"m{len(list(folder.glob('m*.onnx')))}.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("rows", "code"),
    [(99_999_999_999_999, "TOO_MANY_ELEMENTS"), (0, "EMPTY_TENSOR")],
)
def test_a_static_tensor_beside_a_symbolic_one_is_held_to_directmls_size_limits(
    rows: int, code: str, tmp_path: Path
) -> None:
    """DirectML tensors hold at most 2^32-1 elements and no size of 0 (the seeds' rules). A data tensor of
    known shape beside indices of symbolic length was reported as translating (verdict YES, the limits
    'checked when the node runs'), while the same data with indices of known length falls back."""
    import json

    verdicts = []
    for indices in (["K"], [2]):
        path = _symbolic_gather(tmp_path, [rows, 4], indices)
        done = _cli(["inspect", path.name, "--json"], tmp_path)
        assert "Traceback" not in done.stderr
        node = json.loads(done.stdout)["nodes"][0]
        verdicts.append((node["status"], code in [r["code"] for r in node["reasons"]]))
    assert verdicts == [("fallback", True), ("fallback", True)]


@pytest.mark.parametrize(("tolerance", "code"), [([], 1), (["--atol", "0.1"], 0)])
def test_compare_without_a_tolerance_tells_negative_zero_from_zero(
    tolerance: list[str], code: int, tmp_path: Path
) -> None:
    """compare is exact, bit for bit, by default (docs/validate-files.md): a DirectML output of -0.0 where
    onnxruntime's Gather copied 0.0 matched, as |a - e| = 0; with a tolerance the values are compared."""
    path = _symbolic_gather(tmp_path, [3, 4], [2])
    np.savez(tmp_path / "z.npz", d=np.zeros((3, 4), np.float32), i=np.array([0, -1]))
    done = _cli(["export", path.name, "--inputs", "z.npz", "-o", "exp", "-q"], tmp_path)
    assert done.returncode == 0, done.stderr
    expected = np.load(tmp_path / "exp" / "000_g" / "expected_output.npy")
    want = ort_run(onnx.load(path), {"d": np.zeros((3, 4), np.float32), "i": np.array([0, -1])})[0]
    assert expected.tobytes() == want.tobytes()  # +0.0 bits, as onnxruntime copied them
    np.save(tmp_path / "exp" / "000_g" / "dml_output.npy", -expected)
    done = _cli(["compare", "exp", *tolerance], tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert "expected 0.0, got -0.0" in done.stdout


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("DMLSHIM_KERNEL_THREADS", "many", "ignoring DMLSHIM_KERNEL_THREADS='many': not an integer"),
        ("DMLSHIM_KERNEL_THREADS", "-1", "DMLSHIM_KERNEL_THREADS='-1' is below 1: using 1"),
        ("DMLSHIM_KERNEL_CHUNK", "1e6", "ignoring DMLSHIM_KERNEL_CHUNK='1e6': not an integer"),
    ],
)
def test_a_bad_kernel_setting_is_reported_by_the_cli(name: str, value: str, said: str, folder: Path) -> None:
    """The settings are read at import, before the CLI sets up logging: the warning was lost and the value
    silently replaced. The run's values are still onnxruntime's."""
    env = {**os.environ, name: value}
    cmd = [sys.executable, "-m", "dmlshim", "run", "m.onnx", "--inputs", "in.npz", "-o", "o.npz", "-q"]
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert said in done.stderr
    with np.load(folder / "in.npz") as loaded:
        feeds = {"d": loaded["d"], "i": loaded["i"]}
    with np.load(folder / "o.npz") as got:
        np.testing.assert_array_equal(got["o"], ort_run(onnx.load(folder / "m.onnx"), feeds)[0])
