"""validate of a folder or of several models, and which inputs each model runs on (a new user's walk:
``dmlshim validate onnx_models/`` failed on a model whose inputs have no shape, with its inputs shipped
beside it).

The verdicts compare with onnxruntime CPU; the model's outputs on the file are also checked against
onnxruntime run directly on that file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim.cli.main import main
from tests.oracle import IR_VERSION, ZERO_DEPTH_SCATTERND_CRASH, ort_crashes_on_zero_depth_scatternd, ort_run

REPO = Path(__file__).resolve().parents[1]
TABLE = np.arange(24, dtype=np.float32).reshape(6, 4)
IDS = np.array([[5, -1], [0, 2]], dtype=np.int64)


def _shapeless(path: Path) -> None:
    """Gather(data, ids) whose graph inputs carry an element type and no shape (onnxruntime runs it)."""
    data = onnx.ValueInfoProto(name="data")
    data.type.tensor_type.elem_type = TensorProto.FLOAT
    ids = onnx.ValueInfoProto(name="ids")
    ids.type.tensor_type.elem_type = TensorProto.INT64
    out = onnx.ValueInfoProto(name="rows")
    node = helper.make_node("Gather", ["data", "ids"], ["rows"], name="gather_rows", axis=0)
    graph = helper.make_graph([node], "shapeless", [data, ids], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    onnx.save(model, path)


def _shaped(path: Path) -> None:
    node = helper.make_node("Gather", ["data", "ids"], ["rows"], name="gather_rows", axis=0)
    graph = helper.make_graph(
        [node],
        "shaped",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [6, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 2]),
        ],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [2, 2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    onnx.save(model, path)


def _json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_a_model_with_no_generable_inputs_runs_on_the_file_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _shapeless(tmp_path / "noshape.onnx")
    np.savez(tmp_path / "noshape.npz", data=TABLE, ids=IDS)
    _shaped(tmp_path / "shaped.onnx")
    assert main(["validate", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "noshape.onnx " in line)
    assert row.split()[1:3] == ["match", "beside"]
    assert next(
        line for line in out.splitlines() if "shaped.onnx " in line and "noshape" not in line
    ).split()[1:3] == ["match", "generated"]
    assert f"{tmp_path / 'noshape.onnx'}: inputs from {tmp_path / 'noshape.npz'}, beside the model" in out
    assert "summary: 2 match, 0 mismatch, 0 error, 0 crash of 2 models" in out

    assert main(["validate", str(tmp_path), "--json"]) == 0
    docs = _json_lines(capsys.readouterr().out)
    first = next(d for d in docs if d.get("model") == str(tmp_path / "noshape.onnx"))
    assert first["inputs"] == str(tmp_path / "noshape.npz")
    assert "no shape" in str(first["note"])
    shaped = next(d for d in docs if d.get("model") == str(tmp_path / "shaped.onnx"))
    assert shaped["inputs"] is None and shaped["note"] is None


def test_the_file_beside_it_runs_as_onnxruntime_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _shapeless(tmp_path / "noshape.onnx")
    np.savez(tmp_path / "noshape.npz", data=TABLE, ids=IDS)
    # the single model with --inputs DIR takes DIR/<stem>.npz; its saved outputs are onnxruntime's
    out = tmp_path / "out" / "o.npz"
    out.parent.mkdir()
    assert (
        main(
            [
                "validate",
                str(tmp_path / "noshape.onnx"),
                "--inputs",
                str(tmp_path),
                "--save-outputs",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    (want,) = ort_run(str(tmp_path / "noshape.onnx"), {"data": TABLE, "ids": IDS})
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["rows"], want)
    np.testing.assert_array_equal(want[0, 1], TABLE[5])  # -1 counts from the end (ONNX Gather)


@pytest.mark.parametrize(
    ("arrays", "said"),
    [
        ({"data": TABLE}, "it lacks 'ids'"),
        ({"data": TABLE, "ids": IDS, "extra": IDS}, "'extra' is not an input"),
    ],
)
def test_a_file_beside_it_with_other_names_is_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arrays: dict[str, np.ndarray], said: str
) -> None:
    _shapeless(tmp_path / "noshape.onnx")
    np.savez(tmp_path / "noshape.npz", **arrays)
    _shaped(tmp_path / "shaped.onnx")
    assert main(["validate", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "no shape can be generated" in out
    assert f"{tmp_path / 'noshape.npz'} beside it does not hold this model's inputs ({said})" in out
    assert "summary: 1 match, 0 mismatch, 1 error, 0 crash of 2 models" in out


def test_no_file_beside_it_is_the_error_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _shapeless(tmp_path / "noshape.onnx")
    _shaped(tmp_path / "shaped.onnx")
    assert main(["validate", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "no shape can be generated; give --input-shape data=D0,D1,.." in out
    assert "notes:" not in out and "inputs from" not in out


def test_inputs_folder_mirrors_the_folder_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, feeds = tmp_path / "models", tmp_path / "feeds"
    (models / "a").mkdir(parents=True)
    (feeds / "a").mkdir(parents=True)
    _shapeless(models / "a" / "g.onnx")
    _shaped(models / "h.onnx")
    np.savez(feeds / "a" / "g.npz", data=TABLE, ids=IDS)
    np.savez(feeds / "g.npz", data=TABLE[:1], ids=np.array([[3]], dtype=np.int64))  # not the one for a/g
    assert main(["validate", str(models), "--inputs", str(feeds), "--json"]) == 2
    docs = _json_lines(capsys.readouterr().out)
    by_model = {d.get("model"): d for d in docs}
    g = by_model[str(models / "a" / "g.onnx")]
    assert g["status"] == "match" and g["inputs"] == str(feeds / "a" / "g.npz") and g["note"] is None
    report = g["report"]
    assert isinstance(report, dict)
    h = by_model[str(models / "h.onnx")]
    assert h["status"] == "error"  # asked for a file and none is there: never generated in its place
    assert f"expected {feeds / 'h.npz'}" in str(h["message"])


def test_a_missing_file_in_the_inputs_folder_for_one_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _shaped(tmp_path / "h.onnx")
    (tmp_path / "feeds").mkdir()
    assert main(["validate", str(tmp_path / "h.onnx"), "--inputs", str(tmp_path / "feeds")]) == 2
    assert f"expected {tmp_path / 'feeds' / 'h.npz'}" in capsys.readouterr().err


def test_the_shipped_ecosystem_folder_validates(capsys: pytest.CaptureFixture[str]) -> None:
    if ort_crashes_on_zero_depth_scatternd():  # hw_scatternd_empty_index.onnx kills the process there
        pytest.skip(ZERO_DEPTH_SCATTERND_CRASH)
    assert main(["-q", "validate", str(REPO / "onnx_models" / "ecosystem")]) == 0
    out = capsys.readouterr().out
    assert "hw_noshape_inputs.onnx: inputs from" in out
    assert " 0 error, 0 crash of " in out


def test_one_model_names_the_file_beside_it_in_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # one model: the command line is followed as given (no file taken unasked); the error names the file
    _shapeless(tmp_path / "noshape.onnx")
    np.savez(tmp_path / "noshape.npz", data=TABLE, ids=IDS)
    assert main(["validate", str(tmp_path / "noshape.onnx")]) == 2
    err = capsys.readouterr().err
    assert f"beside the model holds its inputs: --inputs {tmp_path / 'noshape.npz'}" in err


def test_the_checker_warning_is_printed_once(tmp_path: Path) -> None:
    # the model is read again for its retry on the file beside it: its onnx.checker warning is not repeated
    import subprocess
    import sys

    _shapeless(tmp_path / "noshape.onnx")
    np.savez(tmp_path / "noshape.npz", data=TABLE, ids=IDS)
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("onnx.checker finds") == 1, done.stderr
