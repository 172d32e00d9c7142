"""Models whose graph inputs are bfloat16 or float8 (converted LLMs, quantizer output) through
``dmlshim validate`` and ``dmlshim run``: generated inputs, ``--inputs`` files in the documented convention
(raw bits as uint16/uint8, or float32 values rounded as onnxruntime's Cast rounds them), and outputs of
those types compared by value.

Expected values come from onnxruntime's CPU provider, single-threaded, run on the same OrtValues; the
rounding ties are the IEEE round-to-nearest-even facts of the bfloat16 format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.cli.main import main as cli
from tests.oracle import IR_VERSION, ort_session


def _save(
    tmp_path: Path, name: str, nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int
) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _cast_gather(tmp_path: Path, elem: int = T.BFLOAT16, opset: int = 17) -> Path:
    """x (elem) -> Cast to float32 -> Gather rows i: the shape of a converted LLM's embedding lookup."""
    return _save(
        tmp_path,
        f"cast_gather_{elem}",
        [
            helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
            helper.make_node("Gather", ["xf", "i"], ["y"], axis=0, name="rows"),
        ],
        [helper.make_tensor_value_info("x", elem, [4, 3]), helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
        opset,
    )


def _direct(tmp_path: Path) -> Path:
    """bfloat16 data straight into a Gather and a ScatterElements, bfloat16 outputs; rows symbolic."""
    return _save(
        tmp_path,
        "bf16_direct",
        [
            helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="gather_rows"),
            helper.make_node("ScatterElements", ["x", "si", "u"], ["s"], axis=0, name="scatter_rows"),
        ],
        [
            helper.make_tensor_value_info("x", T.BFLOAT16, ["n", 3]),
            helper.make_tensor_value_info("i", T.INT64, [2]),
            helper.make_tensor_value_info("si", T.INT64, [1, 3]),
            helper.make_tensor_value_info("u", T.BFLOAT16, [1, 3]),
        ],
        [
            helper.make_tensor_value_info("g", T.BFLOAT16, [2, 3]),
            helper.make_tensor_value_info("s", T.BFLOAT16, ["n", 3]),
        ],
        17,
    )


def _direct_feeds(x: Any, i: np.ndarray, si: np.ndarray, u: Any) -> dict[str, Any]:
    """The feeds of :func:`_direct`'s model as onnxruntime takes them (OrtValues throughout)."""
    return {
        "x": x,
        "i": ort.OrtValue.ortvalue_from_numpy(i),
        "si": ort.OrtValue.ortvalue_from_numpy(si),
        "u": u,
    }


def _ortvalue(bits: np.ndarray, elem: int) -> ort.OrtValue:
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(bits), elem)


def _ort_cast(values: np.ndarray, to: int) -> ort.OrtValue:
    """onnxruntime's own Cast of float32 values to ``to`` (its rounding), as an OrtValue."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["f"], ["c"], to=to)],
        "cast",
        [helper.make_tensor_value_info("f", T.FLOAT, list(values.shape))],
        [helper.make_tensor_value_info("c", to, list(values.shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=IR_VERSION)
    session = ort_session(model)
    return session.run_with_ort_values(["c"], {"f": ort.OrtValue.ortvalue_from_numpy(values)})[0]


def _ort_widen(value: ort.OrtValue) -> np.ndarray:
    """onnxruntime's Cast of a bfloat16/float8 OrtValue to float32 (exact)."""
    elem = {
        "tensor(bfloat16)": T.BFLOAT16,
        "tensor(float8e4m3fn)": T.FLOAT8E4M3FN,
        "tensor(float8e5m2)": T.FLOAT8E5M2,
    }[value.data_type()]
    shape = list(value.shape())
    graph = helper.make_graph(
        [helper.make_node("Cast", ["n"], ["f"], to=T.FLOAT)],
        "widen",
        [helper.make_tensor_value_info("n", elem, shape)],
        [helper.make_tensor_value_info("f", T.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=IR_VERSION)
    return ort_session(model).run(["f"], {"n": value})[0]


def _bits(value: ort.OrtValue) -> np.ndarray:
    """An OrtValue's raw bits, read the way onnxruntime's own IOBinding-free API allows: the float32 it widens
    to, narrowed back by shifting (bfloat16 only)."""
    return (_ort_widen(value).view(np.uint32) >> 16).astype(np.uint16)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert cli(argv) == code
    return json.loads(capsys.readouterr().out)


def _outputs_file(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


# -- generated inputs -----------------------------------------------------------------------------------


def test_validate_generates_bfloat16_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _cast_gather(tmp_path)
    saved_in, saved_out = tmp_path / "in.npz", tmp_path / "out.npz"
    doc = _json(capsys, ["validate", str(model), "--json", "--save-inputs", str(saved_in),
                         "--save-outputs", str(saved_out)])  # fmt: skip
    assert doc["match"] is True and doc["inputs"]["source"] == "random"
    assert doc["inputs"]["shapes"] == {"x": [4, 3], "i": [2]}
    feeds = _outputs_file(saved_in)
    # the bfloat16 input is written as its raw bits (the --inputs convention), finite, normal-sized values
    assert feeds["x"].dtype == np.uint16 and feeds["x"].shape == (4, 3)
    x = _ortvalue(feeds["x"], T.BFLOAT16)
    values = _ort_widen(x)
    assert np.isfinite(values).all() and np.abs(values).max() < 8 and len(np.unique(values)) > 6
    want = ort_session(str(model)).run(["y"], {"x": x, "i": feeds["i"]})[0]
    got = _outputs_file(saved_out)["y"]
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    # the file reads back as the same bits: the same verdict and outputs
    again = tmp_path / "again.npz"
    doc = _json(
        capsys, ["validate", str(model), "--inputs", str(saved_in), "--json", "--save-outputs", str(again)]
    )
    assert doc["match"] is True and doc["inputs"]["source"] == "file"
    assert _outputs_file(again)["y"].tobytes() == want.tobytes()


def test_generated_bfloat16_values_are_onnxruntime_roundings(tmp_path: Path) -> None:
    from dmlshim.inputs import generate

    model = onnx.load(str(_cast_gather(tmp_path)))
    first, second = generate(model, seed=3).feeds, generate(model, seed=3).feeds
    assert isinstance(first["x"], ort.OrtValue) and first["x"].data_type() == "tensor(bfloat16)"
    widened = _ort_widen(first["x"])
    # every value is one bfloat16 holds: onnxruntime's Cast of it back to bfloat16 changes nothing
    assert _bits(_ort_cast(widened, T.BFLOAT16)).tobytes() == _bits(first["x"]).tobytes()
    assert _bits(second["x"]).tobytes() == _bits(first["x"]).tobytes()  # the same seed, the same bits
    assert _bits(generate(model, seed=4).feeds["x"]).tobytes() != _bits(first["x"]).tobytes()


def test_run_generates_bfloat16_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _cast_gather(tmp_path)
    doc = _json(capsys, ["run", str(model), "--json", "-o", str(tmp_path / "y.npz")])
    assert doc["inputs"]["source"] == "random" and doc["inputs"]["shapes"]["x"] == [4, 3]
    assert [n["placement"] for n in doc["record"]["nodes"]] == ["dml"]  # the Gather reads float32
    assert _outputs_file(tmp_path / "y.npz")["y"].shape == (2, 3)


# -- inputs files ---------------------------------------------------------------------------------------

# float32 values between two bfloat16 neighbours: the ties go to the even mantissa (1.0 and 1.015625), which
# truncation would not give for the second (1.0078125); -3.3 is no tie (-3.296875 is the nearer).
TIES = np.array([1.00390625, 1.01171875, -3.3], np.float32)
TIES_ROUNDED = np.array([1.0, 1.015625, -3.296875], np.float32)


def test_inputs_file_bfloat16_as_bits_or_as_float32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _cast_gather(tmp_path)
    values = np.stack([TIES, -TIES, TIES * 2, TIES / 4]).astype(np.float32)
    rounded = _ort_cast(values, T.BFLOAT16)
    assert _ort_widen(rounded)[0].tolist() == TIES_ROUNDED.tolist()  # onnxruntime rounds to nearest even
    i = np.array([2, 0])
    want = ort_session(str(model)).run(["y"], {"x": rounded, "i": i})[0]
    np.savez(tmp_path / "bits.npz", x=_bits(rounded), i=i)
    np.savez(tmp_path / "values.npz", x=values, i=i)
    for form in ("bits", "values"):
        out = tmp_path / f"{form}_out.npz"
        doc = _json(capsys, ["validate", str(model), "--inputs", str(tmp_path / f"{form}.npz"), "--json",
                             "--save-outputs", str(out)])  # fmt: skip
        assert doc["match"] is True, form
        assert _outputs_file(out)["y"].tobytes() == want.tobytes(), form
        assert cli(["run", str(model), "--inputs", str(tmp_path / f"{form}.npz"), "-o", str(out),
                    "--overwrite", "-q"]) == 0  # fmt: skip
        assert _outputs_file(out)["y"].tobytes() == want.tobytes(), form
        capsys.readouterr()


def test_inputs_file_refuses_other_dtypes_and_values_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _cast_gather(tmp_path)
    np.savez(tmp_path / "f64.npz", x=np.ones((4, 3)), i=np.array([0, 1]))
    np.savez(tmp_path / "u8.npz", x=np.ones((4, 3), np.uint8), i=np.array([0, 1]))
    for name, dtype in (("f64", "float64"), ("u8", "uint8")):
        for command in ("validate", "run"):
            assert cli([command, str(model), "--inputs", str(tmp_path / f"{name}.npz")]) == 2
            err = capsys.readouterr().err
            assert "input 'x' is bfloat16" in err and f"the array given is {dtype}" in err, err
            assert "uint16" in err and "float32" in err and "Traceback" not in err
    f8 = _cast_gather(tmp_path, T.FLOAT8E4M3FN, opset=19)
    if not _accepted(f8):
        pytest.skip(f"onnxruntime {ort.__version__}'s CPU provider takes no float8e4m3fn graph input")
    big = np.zeros((4, 3), np.float32)
    big[1, 2] = 1000.0  # float8e4m3fn's largest finite value is 448
    np.savez(tmp_path / "big.npz", x=big, i=np.array([0, 1]))
    assert cli(["validate", str(f8), "--inputs", str(tmp_path / "big.npz")]) == 2
    err = capsys.readouterr().err
    assert "1000.0 at [1, 2]" in err and "448" in err and "Traceback" not in err, err


def test_ml_dtypes_array_saved_by_numpy_reads_as_its_bits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = _cast_gather(tmp_path)
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
    np.savez(tmp_path / "ml.npz", x=x.astype(ml_dtypes.bfloat16), i=np.array([3, 1]))  # numpy writes |V2
    want = ort_session(str(model)).run(["y"], {"x": _ort_cast(x, T.BFLOAT16), "i": np.array([3, 1])})[0]
    assert (
        cli(["run", str(model), "--inputs", str(tmp_path / "ml.npz"), "-o", str(tmp_path / "y.npz"), "-q"])
        == 0
    )
    assert _outputs_file(tmp_path / "y.npz")["y"].tobytes() == want.tobytes()
    capsys.readouterr()


# -- bfloat16 data into gather/scatter nodes, bfloat16 outputs --------------------------------------------


def test_bfloat16_data_into_gather_and_scatter_falls_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _direct(tmp_path)
    rows = [[1.5, -2.25, 3.0], [0.1, 0.2, 0.3], [-0.0, 7.0, 1e-3], [4.0, 5.0, 6.0]]
    x = _ort_cast(np.array(rows, np.float32), T.BFLOAT16)
    u = _ort_cast(TIES.reshape(1, 3), T.BFLOAT16)
    i, si = np.array([3, 2]), np.array([[1, 0, 3]])
    np.savez(tmp_path / "in.npz", x=_bits(x), i=i, si=si, u=_bits(u))
    fed = _direct_feeds(x, i, si, u)
    g, s = ort_session(str(model)).run_with_ort_values(["g", "s"], fed)
    out = tmp_path / "out.npz"
    doc = _json(capsys, ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json",
                         "--save-outputs", str(out)])  # fmt: skip
    assert doc["match"] is True and doc["exact"] is True
    by_name = {o["name"]: o for o in doc["outputs"]}
    assert by_name["g"]["dtype"] == "bfloat16" and by_name["g"]["shape"] == [2, 3]
    assert by_name["s"]["dtype"] == "bfloat16" and by_name["s"]["shape"] == [4, 3]
    assert by_name["s"]["whole_model"]["identical"] is True  # the whole model returned its bfloat16 too
    saved = _outputs_file(out)  # bfloat16 outputs are saved as their raw bits, as --inputs takes them
    assert saved["g"].dtype == saved["s"].dtype == np.uint16
    assert saved["g"].tobytes() == _bits(g).tobytes() and saved["s"].tobytes() == _bits(s).tobytes()
    assert saved["g"][1, 0] == 0x8000  # -0.0 kept: bits, not just values
    nodes = {n["name"]: n for n in doc["nodes"]}
    for name in ("gather_rows", "scatter_rows"):
        assert nodes[name]["status"] == "fallback" and nodes[name]["run"]["placement"] == "onnxruntime-cpu"
        assert "DATA_TYPE_UNSUPPORTED" in {r["code"] for r in nodes[name]["reasons"]}
        assert nodes[name]["output_match"] is True
    # run: the record says where each node ran and why
    doc = _json(capsys, ["run", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"])
    for node in doc["record"]["nodes"]:
        assert node["placement"] == "onnxruntime-cpu" and node["status"] == "fallback"
        assert any("bfloat16" in r["message"] for r in node["reasons"])
    assert {o["name"]: o["value"]["type"] for o in doc["outputs"]} == {
        "g": "tensor(bfloat16)",
        "s": "tensor(bfloat16)",
    }


def test_reference_outputs_of_a_bfloat16_output_get_its_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a framework's bfloat16 result, upcast to float32, one rounding away: within bfloat16's tolerance
    model = _direct(tmp_path)
    x = _ort_cast(np.linspace(1, 4, 6, dtype=np.float32).reshape(2, 3), T.BFLOAT16)
    u = _ort_cast(np.full((1, 3), 0.5, np.float32), T.BFLOAT16)
    i, si = np.array([1, 0]), np.array([[1, 0, 1]])
    np.savez(tmp_path / "in.npz", x=_bits(x), i=i, si=si, u=_bits(u))
    fed = _direct_feeds(x, i, si, u)
    g, s = (_ort_widen(v) for v in ort_session(str(model)).run_with_ort_values(["g", "s"], fed))
    for scale, code in ((1.03, 0), (1.2, 1)):
        np.savez(tmp_path / "ref.npz", g=g * np.float32(scale), s=s)
        argv = ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"]
        doc = _json(capsys, [*argv, "--reference-outputs", str(tmp_path / "ref.npz")], code)
        external = {o["name"]: o["reference_outputs"] for o in doc["outputs"]}
        assert (external["g"]["rtol"], external["g"]["atol"]) == (0.06, 0.06)
        assert external["g"]["match"] is (code == 0) and external["s"]["match"] is True


def test_bfloat16_outputs_with_a_symbolic_dimension_are_generated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # generating checks candidate sizes on onnxruntime, whose run() cannot return a bfloat16 output
    doc = _json(capsys, ["validate", str(_direct(tmp_path)), "--json", "--input-shape", "n=5"])
    assert doc["match"] is True and doc["inputs"]["shapes"]["x"] == [5, 3]
    doc = _json(capsys, ["validate", str(_direct(tmp_path)), "--json"])
    assert doc["match"] is True and doc["inputs"]["symbols"] == {"n": 2}


def test_bfloat16_comparison_is_bit_for_bit_or_within_the_tolerance() -> None:
    from dmlshim.validate import compare_arrays
    from dmlshim.validate.value_kinds import as_compared, compared_dtype

    def bf16(*bits: int) -> ort.OrtValue:
        return _ortvalue(np.array(bits, np.uint16), T.BFLOAT16)

    # bfloat16 bits: 0x0000 +0.0, 0x8000 -0.0, 0x3F80 1.0, 0x3F81 1.0078125, 0x7FC0/0x7FC1 NaNs
    zero, negative_zero = as_compared(bf16(0x3F80, 0x0000)), as_compared(bf16(0x3F80, 0x8000))
    assert compared_dtype(bf16(0)) == "bfloat16"
    signs = compare_arrays(zero, negative_zero, exact=True)
    assert not signs.match and signs.first_mismatch is not None and signs.first_mismatch.index == (1,)
    assert compare_arrays(zero, negative_zero, 0.0, 1e-9).match  # with a tolerance: values, and -0 == 0
    assert compare_arrays(as_compared(bf16(0x7FC0)), as_compared(bf16(0x7FC1)), exact=True).match
    one_ulp = compare_arrays(as_compared(bf16(0x3F80)), as_compared(bf16(0x3F81)), exact=True)
    assert not one_ulp.match and one_ulp.max_abs_diff == 0.0078125
    assert compare_arrays(as_compared(bf16(0x3F80)), as_compared(bf16(0x3F81)), 1e-2, 0.0).match


# -- float8 ---------------------------------------------------------------------------------------------


def _accepted(path: Path) -> bool:
    """Whether this onnxruntime's CPU provider loads the model (asked at run time, not by version)."""
    try:
        ort_session(str(path))
    except Exception:  # onnxruntime's exception types share no useful base
        return False
    return True


@pytest.mark.parametrize("elem", [T.FLOAT8E4M3FN, T.FLOAT8E5M2], ids=["e4m3fn", "e5m2"])
def test_float8_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str], elem: int) -> None:
    model = _save(
        tmp_path,
        "f8",
        [
            helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
            helper.make_node("Gather", ["xf", "i"], ["y"], axis=0, name="rows"),
            helper.make_node("Identity", ["x"], ["x_out"]),
        ],
        [helper.make_tensor_value_info("x", elem, [4, 3]), helper.make_tensor_value_info("i", T.INT64, [2])],
        [
            helper.make_tensor_value_info("y", T.FLOAT, [2, 3]),
            helper.make_tensor_value_info("x_out", elem, [4, 3]),
        ],
        21,
    )
    if not _accepted(model):
        pytest.skip(f"onnxruntime {ort.__version__}'s CPU provider takes no such float8 graph input")
    name = "float8e4m3fn" if elem == T.FLOAT8E4M3FN else "float8e5m2"
    # generated
    saved = tmp_path / "in.npz"
    doc = _json(capsys, ["validate", str(model), "--json", "--save-inputs", str(saved)])
    assert doc["match"] is True
    assert {o["name"]: o["dtype"] for o in doc["outputs"]} == {"y": "float32", "x_out": name}
    bits = _outputs_file(saved)["x"]
    assert bits.dtype == np.uint8 and bits.shape == (4, 3)
    assert np.isfinite(_ort_widen(_ortvalue(bits, elem))).all()
    # from a file: float32 values rounded by onnxruntime's Cast, and the same as raw bits
    values = np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)
    rounded = _ort_cast(values, elem)
    i = np.array([1, 3])
    want = ort_session(str(model)).run(["y"], {"x": rounded, "i": i})[0]
    raw = np.asarray(_outputs_bits(rounded))
    np.savez(tmp_path / "values.npz", x=values, i=i)
    np.savez(tmp_path / "bits.npz", x=raw, i=i)
    for form in ("values", "bits"):
        out = tmp_path / f"{form}_y.npz"
        assert cli(["run", str(model), "--inputs", str(tmp_path / f"{form}.npz"), "-o", str(out), "-q"]) == 0
        assert _outputs_file(out)["y"].tobytes() == want.tobytes(), form
    capsys.readouterr()


def _outputs_bits(value: ort.OrtValue) -> np.ndarray:
    """The raw bytes of a one-byte-per-element OrtValue, through onnxruntime's IOBinding into uint8 memory
    bound with the same element type."""
    shape = list(value.shape())
    host = np.empty(shape, np.uint8)
    elem = {"tensor(float8e4m3fn)": T.FLOAT8E4M3FN, "tensor(float8e5m2)": T.FLOAT8E5M2}[value.data_type()]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b"])],
        "copy",
        [helper.make_tensor_value_info("a", elem, shape)],
        [helper.make_tensor_value_info("b", elem, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    session = ort_session(model)
    binding = session.io_binding()
    binding.bind_ortvalue_input("a", value)
    binding.bind_output("b", "cpu", 0, elem, shape, host.ctypes.data)
    session.run_with_iobinding(binding)
    return host


def test_export_takes_bfloat16_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _cast_gather(tmp_path)
    x = _ort_cast(np.stack([TIES, TIES * 3, -TIES, TIES / 2]).astype(np.float32), T.BFLOAT16)
    i = np.array([3, 1])
    np.savez(tmp_path / "in.npz", x=_bits(x), i=i)
    want = ort_session(str(model)).run(["y"], {"x": x, "i": i})[0]
    folders = {}
    for name, extra in (("file", ["--inputs", str(tmp_path / "in.npz")]), ("generated", [])):
        doc = _json(capsys, ["export", str(model), "-o", str(tmp_path / name), "--json", *extra])
        assert [e["node"] for e in doc["exported"]] == ["rows"], name
        index = json.loads((tmp_path / name / "index.json").read_text())
        assert index["input_shapes"] == {"x": [4, 3], "i": [2]}, name
        folders[name] = tmp_path / name / doc["exported"][0]["folder"]
    # the Gather's data is the float32 onnxruntime widened the bfloat16 bits to; its output onnxruntime's
    node = folders["file"]
    assert np.load(node / "input.npy").tobytes() == _ort_widen(x).tobytes()
    assert np.load(node / "expected_output.npy").tobytes() == want.tobytes()
