"""``validate --save-outputs`` of bfloat16 and float8 outputs: written as their raw bits (``uint16`` /
``uint8``), which is what onnxruntime's ``InferenceSession.run`` (and so polygraphy's onnxruntime runner)
returns for a float8e4m3fn output and what ``--inputs`` takes for such an input; onnxruntime's ``run``
cannot return a bfloat16 output at all. Saved then read back with ``--reference-outputs`` on the same
model, both the ``.npz`` and the polygraphy ``RunResults`` ``.json`` forms compare equal.

Expected values: onnxruntime's CPU provider (its ``run`` for float8e4m3fn; ``run_with_ort_values`` and its
own Cast to float32, shifted to the upper 16 bits, for bfloat16), and the bit patterns of the formats
(bfloat16 0x3F80 = 1.0, 0x4000 = 2.0; float8e5m2 0x7C = +inf, 0x7D..0x7F NaNs).
"""

from __future__ import annotations

import base64
import io
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


def _save(tmp_path: Path, name: str, elem: int, opset: int) -> Path:
    """x (float32) -> Gather rows i -> Cast to ``elem`` -> y; and n (``elem``) -> Identity -> n_out."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="rows"),
            helper.make_node("Cast", ["g"], ["y"], to=elem),
            helper.make_node("Identity", ["n"], ["n_out"]),
        ],
        name,
        [
            helper.make_tensor_value_info("x", T.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", T.INT64, [2]),
            helper.make_tensor_value_info("n", elem, [4]),
        ],
        [
            helper.make_tensor_value_info("y", elem, [2, 3]),
            helper.make_tensor_value_info("n_out", elem, [4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert cli(argv) == code
    return json.loads(capsys.readouterr().out)


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _run_results(path: Path) -> dict[str, np.ndarray]:
    """A polygraphy RunResults JSON read by polygraphy's rules (base64 of each array's .npy bytes)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    (_runner, iterations), *_ = doc["lst"]
    return {
        name: np.load(io.BytesIO(base64.b64decode(lazy["values"]["array"])), allow_pickle=False)
        for name, lazy in iterations[0]["outputs"].items()
    }


_X = np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)
_I = np.array([3, 0])


def _bf16_bits_by_onnxruntime(model: Path, n_bits: np.ndarray) -> dict[str, np.ndarray]:
    """onnxruntime's bfloat16 outputs as raw bits: its ``run`` refuses a bfloat16 output, so through
    ``run_with_ort_values`` and onnxruntime's own (exact) Cast to float32, whose upper half they are."""
    fed = {
        "x": ort.OrtValue.ortvalue_from_numpy(_X),
        "i": ort.OrtValue.ortvalue_from_numpy(_I),
        "n": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(n_bits, T.BFLOAT16),
    }
    values = ort_session(str(model)).run_with_ort_values(["y", "n_out"], fed)
    widen = helper.make_graph(
        [helper.make_node("Cast", ["b"], ["f"], to=T.FLOAT)],
        "widen",
        [helper.make_tensor_value_info("b", T.BFLOAT16, None)],
        [helper.make_tensor_value_info("f", T.FLOAT, None)],
    )
    session = ort_session(
        helper.make_model(widen, opset_imports=[helper.make_opsetid("", 19)], ir_version=IR_VERSION)
    )
    out = {}
    for name, value in zip(("y", "n_out"), values, strict=True):
        wide = session.run(["f"], {"b": value})[0]
        out[name] = (wide.view(np.uint32) >> 16).astype(np.uint16)
    return out


def test_onnxruntime_run_returns_no_bfloat16_output_and_float8e4m3fn_as_bits(tmp_path: Path) -> None:
    """The facts the file format follows: x rows 3, 0 are [1.909, 2.455, 3] and their negatives; in
    float8e4m3fn 1.875 = 0x3F, 2.5 = 0x42, 3.0 = 0x44 (bias 7), the sign bit 0x80."""
    bf16 = ort_session(str(_save(tmp_path, "bf", T.BFLOAT16, 17)))
    n = np.zeros(4, np.uint16)
    fed = {"x": _X, "i": _I, "n": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(n, T.BFLOAT16)}
    with pytest.raises(Exception, match="bfloat16"):  # onnxruntime's exception types share no useful base
        bf16.run(["y"], fed)
    f8 = ort_session(str(_save(tmp_path, "f8", T.FLOAT8E4M3FN, 21)))
    fed["n"] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros(4, np.uint8), T.FLOAT8E4M3FN)
    y = f8.run(["y"], fed)[0]
    assert y.dtype == np.uint8 and y.tolist() == [[0x3F, 0x42, 0x44], [0xC4, 0xC2, 0xBF]]


@pytest.mark.parametrize("suffix", ["npz", "json"])
def test_bfloat16_outputs_saved_as_bits_and_read_back_equal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    model = _save(tmp_path, "bf", T.BFLOAT16, 17)
    # n: 1.0, -0.0, a quiet NaN with a payload, -inf
    n_bits = np.array([0x3F80, 0x8000, 0x7FC1, 0xFF80], np.uint16)
    np.savez(tmp_path / "in.npz", x=_X, i=_I, n=n_bits)
    want = _bf16_bits_by_onnxruntime(model, n_bits)
    out = tmp_path / f"out.{suffix}"
    inputs = ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"]
    doc = _json(capsys, [*inputs, "--save-outputs", str(out)])
    assert doc["match"] is True
    saved = _npz(out) if suffix == "npz" else _run_results(out)
    for name in ("y", "n_out"):
        assert saved[name].dtype == np.uint16 and saved[name].tobytes() == want[name].tobytes(), name
    assert saved["n_out"].tolist() == n_bits.tolist()  # the NaN payload and -0.0 kept: the bits themselves
    # the saved file is validate's own reference, and --inputs reads it back as the same bfloat16 values
    doc = _json(capsys, [*inputs, "--reference-outputs", str(out)])
    external = {o["name"]: o["reference_outputs"] for o in doc["outputs"]}
    assert doc["match"] is True
    assert all(e["match"] and e["max_abs_diff"] == 0.0 for e in external.values()), external
    # compared as values, not as integers: 1.0 (0x3F80) against 2.0 (0x4000) differs by 1.0, not by 128
    np.savez(tmp_path / "off.npz", y=want["y"], n_out=np.array([0x4000, 0x8000, 0x7FC1, 0xFF80], np.uint16))
    doc = _json(capsys, [*inputs, "--reference-outputs", str(tmp_path / "off.npz")], 1)
    external = {o["name"]: o["reference_outputs"] for o in doc["outputs"]}
    assert external["y"]["match"] is True
    assert external["n_out"]["match"] is False and external["n_out"]["max_abs_diff"] == 1.0
    assert external["n_out"]["first_mismatch"]["index"] == [0]


@pytest.mark.parametrize("suffix", ["npz", "json"])
def test_float8e4m3fn_outputs_saved_as_onnxruntime_returns_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    model = _save(tmp_path, "f8", T.FLOAT8E4M3FN, 21)
    n_bits = np.array([0x38, 0x80, 0x7F, 0xFE], np.uint8)  # 1.0, -0.0, NaN, -448
    np.savez(tmp_path / "in.npz", x=_X, i=_I, n=n_bits)
    fed = {"x": _X, "i": _I, "n": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(n_bits, T.FLOAT8E4M3FN)}
    y, n_out = ort_session(str(model)).run(["y", "n_out"], fed)  # what polygraphy's runner saves
    out = tmp_path / f"out.{suffix}"
    inputs = ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"]
    assert _json(capsys, [*inputs, "--save-outputs", str(out)])["match"] is True
    saved = _npz(out) if suffix == "npz" else _run_results(out)
    assert (saved["y"].dtype, saved["y"].tobytes()) == (y.dtype, y.tobytes())
    assert (saved["n_out"].dtype, saved["n_out"].tobytes()) == (n_out.dtype, n_out.tobytes())
    for reference in (out, tmp_path / "ort.npz"):
        np.savez(tmp_path / "ort.npz", y=y, n_out=n_out)  # onnxruntime's own result as a reference too
        doc = _json(capsys, [*inputs, "--reference-outputs", str(reference)])
        assert doc["match"] is True
        assert all(o["reference_outputs"]["max_abs_diff"] == 0.0 for o in doc["outputs"])


def test_float8e5m2_infinities_and_nan_payloads_survive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cast to float8e5m2 saturates an infinity and has one NaN: values re-encoded from float32 would
    lose them; the saved file holds the bits the model produced."""
    model = _save(tmp_path, "e5", T.FLOAT8E5M2, 21)
    try:
        ort_session(str(model))
    except Exception:  # onnxruntime's exception types share no useful base
        pytest.skip(f"onnxruntime {ort.__version__}'s CPU provider takes no float8e5m2 graph input")
    n_bits = np.array([0x7C, 0xFC, 0x7D, 0xFE], np.uint8)  # +inf, -inf, two NaNs with payloads
    np.savez(tmp_path / "in.npz", x=_X, i=_I, n=n_bits)
    out = tmp_path / "out.npz"
    argv = ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"]
    assert _json(capsys, [*argv, "--save-outputs", str(out)])["match"] is True
    assert _npz(out)["n_out"].tolist() == n_bits.tolist()
    assert _json(capsys, [*argv, "--reference-outputs", str(out)])["match"] is True


def test_a_float32_reference_still_compares_with_a_bfloat16_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A framework's bfloat16 result upcast to float32 (torch: ``.float()``): compared by value."""
    model = _save(tmp_path, "bf", T.BFLOAT16, 17)
    n_bits = np.array([0x3F80, 0x8000, 0x4000, 0xBF80], np.uint16)  # 1, -0, 2, -1
    np.savez(tmp_path / "in.npz", x=_X, i=_I, n=n_bits)
    want = _bf16_bits_by_onnxruntime(model, n_bits)
    as_float32 = {k: (v.astype(np.uint32) << 16).view(np.float32) for k, v in want.items()}
    np.savez(tmp_path / "f32.npz", **as_float32)
    argv = ["validate", str(model), "--inputs", str(tmp_path / "in.npz"), "--json"]
    doc = _json(capsys, [*argv, "--reference-outputs", str(tmp_path / "f32.npz")])
    assert doc["match"] is True
    assert as_float32["n_out"].tolist() == [1.0, -0.0, 2.0, -1.0]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    # an ml_dtypes bfloat16 array, which numpy.savez stores as untyped two-byte values (|V2)
    np.savez(tmp_path / "ml.npz", **{k: v.view(ml_dtypes.bfloat16) for k, v in want.items()})
    assert _npz(tmp_path / "ml.npz")["y"].dtype.str == "|V2"
    assert _json(capsys, [*argv, "--reference-outputs", str(tmp_path / "ml.npz")])["match"] is True


def test_the_python_report_keeps_the_bits(tmp_path: Path) -> None:
    from dmlshim.validate import validate_model

    model = _save(tmp_path, "bf", T.BFLOAT16, 17)
    n_bits = np.array([0x3F80, 0x8000, 0x7FC1, 0xFF80], np.uint16)
    np.savez(tmp_path / "in.npz", x=_X, i=_I, n=n_bits)
    report = validate_model(str(model), inputs=str(tmp_path / "in.npz"))
    by_name = {o.name: o for o in report.outputs}
    assert by_name["n_out"].dtype == "bfloat16" and by_name["n_out"].dmlshim.dtype == np.float32
    assert by_name["n_out"].dmlshim_bits.tolist() == n_bits.tolist()
    assert onnx.load(str(model)).graph.output[0].type.tensor_type.elem_type == T.BFLOAT16
