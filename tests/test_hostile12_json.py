"""Hostile round 12: ``dmlshim run -o OUT.json`` and ``validate --save-outputs X.json`` write polygraphy's
RunResults JSON; read back by polygraphy's rules (each array the base64 of its ``.npy`` bytes, in a
``LazyArray`` of an ``IterationResult``), every output onnxruntime returns must come back bit for bit with
its dtype and shape, under its own name (unicode, quotes, slashes, backslashes, a NUL).
Expected values: onnxruntime's CPU session of the same model.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from tests.oracle import IR_VERSION, ort_session

_NAMES = ['uni\u00e9\u4e2d "q"', "a/b\\c", "sp ace'", "\u0000nul"]
_CONSTANTS = [
    (T.FLOAT16, [np.nan, np.inf, -np.inf, -0.0, 1.5]),
    (T.BOOL, [True, False, True]),
    (T.FLOAT8E4M3FN, [np.nan, 448, -448, -0.0, 1.5]),
    (T.DOUBLE, [np.nan, np.inf, -np.inf, -0.0, 1e-310]),
    (T.UINT64, [0, 2**64 - 1, 3]),
    (T.INT8, [-128, 127, 0]),
]


def _model() -> onnx.ModelProto:
    """Constants of many dtypes as graph outputs under hostile names, a 0-d and an empty gather."""
    inits, outputs = [], []
    for k, (dtype, values) in enumerate(_CONSTANTS):
        name = _NAMES[k % len(_NAMES)] + str(k)
        inits.append(helper.make_tensor(name, dtype, [len(values)], values))
        outputs.append(helper.make_tensor_value_info(name, dtype, None))
    nodes = [
        helper.make_node("Gather", ["x", "i0"], ["zero-d"], axis=0),
        helper.make_node("Gather", ["x", "none"], ["empty"], axis=0),
        helper.make_node("Gather", ["x", "i2"], ["two"], axis=0),
    ]
    inits += [
        helper.make_tensor("i0", T.INT64, [], [1]),
        helper.make_tensor("none", T.INT64, [0], []),
        helper.make_tensor("i2", T.INT64, [2], [2, 0]),
    ]
    outputs += [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("zero-d", "empty", "two")]
    graph = helper.make_graph(
        nodes, "dtypes", [helper.make_tensor_value_info("x", T.FLOAT, [3])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)


def _arrays_by_polygraphy_rules(path: Path) -> dict[str, np.ndarray]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["polygraphy_class"] == "RunResults"
    (_runner, iterations), *_ = doc["lst"]
    iteration = iterations[0]
    assert iteration["polygraphy_class"] == "IterationResult"
    found = {}
    for name, lazy in iteration["outputs"].items():
        assert lazy["polygraphy_class"] == "LazyArray"
        encoded = lazy["values"]
        assert encoded["polygraphy_class"] == "ndarray"
        found[name] = np.load(io.BytesIO(base64.b64decode(encoded["array"])), allow_pickle=False)
    return found


@pytest.mark.parametrize("command", ["run", "validate"])
def test_every_output_survives_the_json_file_bit_for_bit(command: str, tmp_path: Path) -> None:
    model = _model()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.array([np.nan, -0.0, np.inf], np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    session = ort_session(model, quiet=True)
    expected = dict(zip([o.name for o in model.graph.output], session.run(None, {"x": x}), strict=True))
    save = ["-o", "out.json"] if command == "run" else ["--save-outputs", "out.json"]
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", command, "m.onnx", "--inputs", "in.npz", *save, "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    found = _arrays_by_polygraphy_rules(tmp_path / "out.json")
    assert set(found) == set(expected)
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:  # validate then holds a float8 output as its float32 values, and saves those
        if command == "validate":
            expected = {n: v for n, v in expected.items() if not n.startswith(_NAMES[2])}
    for name, value in expected.items():
        got = found[name]
        assert (got.dtype, got.shape, got.tobytes()) == (value.dtype, value.shape, value.tobytes()), name
    try:
        from polygraphy.comparator import RunResults
    except ImportError:
        return
    iteration = RunResults.load(str(tmp_path / "out.json"))[0][1][0]
    for name, value in expected.items():
        assert np.asarray(iteration[name]).tobytes() == value.tobytes(), name


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_validates_own_saved_outputs_are_its_reference(tmp_path: Path) -> None:
    """A float8 output saved by --save-outputs (its raw bits, as onnxruntime returns it) read back by
    --reference-outputs: the same values, so a match (was: 'dtype float8_e4m3fn, the reference gives
    |V1', a mismatch)."""
    onnx.save(_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.array([1.0, -0.0, 2.5], np.float32))
    saved = _cli(["validate", "m.onnx", "--inputs", "in.npz", "--save-outputs", "o.json", "-q"], tmp_path)
    assert saved.returncode == 0, saved.stderr
    again = _cli(["validate", "m.onnx", "--inputs", "in.npz", "--reference-outputs", "o.json"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "MATCH" in again.stdout


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_output_name_holding_nul_is_refused_for_npz_naming_it(command: str, tmp_path: Path) -> None:
    """A zip member's name ends at a NUL: the output came back named '' (and reading that file back was
    a bare IndexError). The .npz is refused, naming the output; nothing is written."""
    onnx.save(_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros(3, np.float32))
    save = ["-o", "o.npz"] if command == "run" else ["--save-outputs", "o.npz"]
    done = _cli([command, "m.onnx", "--inputs", "in.npz", *save, "-q"], tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "NUL" in done.stderr and ".json" in done.stderr
    assert not (tmp_path / "o.npz").exists()


def test_an_npz_member_with_an_empty_name_is_a_clear_error(tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as archive:
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(3, np.float32))
        with archive.open("\0.npy", "w") as member:  # zipfile cuts the name at the NUL: an empty name
            member.write(buffer.getvalue())
    onnx.save(_model(), tmp_path / "m.onnx")
    done = _cli(["run", "m.onnx", "--inputs", "bad.npz", "-q"], tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "empty name" in done.stderr


def test_an_output_name_too_long_for_a_zip_member_is_refused_for_npz(tmp_path: Path) -> None:
    """A zip member name holds at most 65535 bytes: an .npz of a 70000-character output name was a bare
    struct.error; the .json file holds it."""
    name = "a" * 70000
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], [name], axis=0)],
        "long",
        [helper.make_tensor_value_info("x", T.FLOAT, [3]), helper.make_tensor_value_info("i", T.INT64, [1])],
        [helper.make_tensor_value_info(name, T.FLOAT, None)],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION),
        tmp_path / "m.onnx",
    )
    np.savez(tmp_path / "in.npz", x=np.array([1.0, 2.0, 3.0], np.float32), i=np.array([1]))
    done = _cli(["run", "m.onnx", "--inputs", "in.npz", "-o", "o.npz", "-q"], tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "too long for an .npz member name" in done.stderr and len(done.stderr) < 2000
    assert not (tmp_path / "o.npz").exists()
    done = _cli(["run", "m.onnx", "--inputs", "in.npz", "-o", "o.json", "-q"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert _arrays_by_polygraphy_rules(tmp_path / "o.json")[name].tolist() == [2.0]
