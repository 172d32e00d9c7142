"""DxDispatch model files: every initialValues form, writing, replaying with the kernels, and errors."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dml.enums import DataType, FeatureLevel
from dmlshim.dml.json_form import JsonFormError
from dmlshim.dml.operators import GatherElementsDesc, ScatterDesc
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.dxdispatch import (
    BufferResource,
    ConstantValues,
    DispatchCommand,
    DxDispatchModel,
    NpyFile,
    SequenceValues,
    ValueList,
    WriteFileCommand,
    load_model_file,
    model_from_json,
    single_operator_model,
    write_model_file,
)
from dmlshim.dxdispatch.replay import replay
from dmlshim.errors import BadInputError, BadModelError, IndexOutOfRangeError, InvalidDescriptorError
from dmlshim.kernels import IndexMode, execute

REPO = Path(__file__).resolve().parents[1]


def gather_elements_model() -> dict[str, Any]:
    """GATHER_ELEMENTS on a 3x3 input (the seed page's example), as plain JSON."""
    return {
        "provenance": {"tool": "test"},
        "resources": {
            "input": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3, 4, 5, 6, 7, 8, 9]},
            "indices": {"initialValuesDataType": "INT32", "initialValues": [1, 2, 0, 2, 0, 0]},
            "output": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 6, "value": 0}},
        },
        "dispatchables": {
            "op": {
                "type": "DML_OPERATOR_GATHER_ELEMENTS",
                "desc": {
                    "InputTensor": {"DataType": "FLOAT32", "Sizes": [3, 3]},
                    "IndicesTensor": {"DataType": "INT32", "Sizes": [2, 3]},
                    "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 3]},
                    "Axis": 0,
                },
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "op",
                "bindings": {"InputTensor": "input", "IndicesTensor": "indices", "OutputTensor": "output"},
            },
            {"type": "writeFile", "resource": "output", "targetPath": "out.npy", "dimensions": [2, 3]},
        ],
    }


GATHER_ELEMENTS_EXPECTED = np.array([[4, 8, 3], [7, 2, 3]], np.float32)


def save(folder: Path, obj: Any, name: str = "model.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def resource(obj: Any, data_type: str | None = "FLOAT32", **extra: Any) -> BufferResource:
    """Parse one resource through a minimal model."""
    res: dict[str, Any] = {"initialValues": obj, **extra}
    if data_type is not None:
        res["initialValuesDataType"] = data_type
    return model_from_json({"resources": {"r": res}, "dispatchables": {}, "commands": []}).resources["r"]


# --- initialValues forms --------------------------------------------------------------------------------


def test_value_list() -> None:
    r = resource([1, 2.5, "nan", "inf", "-inf"])
    assert isinstance(r.initial_values, ValueList)
    values = r.values()
    assert values.dtype == np.float32
    np.testing.assert_array_equal(values[:2], [1, 2.5])
    assert np.isnan(values[2]) and values[3] == np.inf and values[4] == -np.inf
    assert r.buffer_size_in_bytes == 20


def test_constant() -> None:
    r = resource({"valueCount": 3, "value": 7}, "INT16")
    assert r.initial_values == ConstantValues(3, 7)
    np.testing.assert_array_equal(r.values(), np.array([7, 7, 7], np.int16))
    # 6 bytes of values, rounded up to 4 as DxDispatch does without sizeInBytes.
    assert r.buffer_size_in_bytes == 8


def test_sequence_accumulates_in_the_buffer_type() -> None:
    r = resource({"valueCount": 5, "valueStart": 250, "valueDelta": 3}, "UINT8")
    assert r.initial_values == SequenceValues(5, 250, 3)
    np.testing.assert_array_equal(r.values(), np.array([250, 253, 0, 3, 6], np.uint8))
    f = resource({"valueCount": 1000, "valueStart": 0, "valueDelta": 0.1}, "FLOAT32").values()
    running = np.float32(0)
    for value in f[1:]:
        running = np.float32(running + np.float32(0.1))
        assert value == running
    neg = resource({"valueCount": 3, "valueStart": -1, "valueDelta": -1}, "DML_TENSOR_DATA_TYPE_INT64")
    np.testing.assert_array_equal(neg.values(), np.array([-1, -2, -3], np.int64))


def test_npy_source_path_relative_to_the_model(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", np.arange(6, dtype=np.uint16).reshape(2, 3))
    obj: dict[str, Any] = {
        "resources": {"r": {"initialValues": {"sourcePath": "data/x.npy"}}},
        "dispatchables": {},
        "commands": [],
    }
    model = load_model_file(save(tmp_path, obj))
    r = model.resources["r"]
    assert r.data_type == DataType.UINT16
    assert isinstance(r.initial_values, NpyFile)
    np.testing.assert_array_equal(r.values(), np.arange(6, dtype=np.uint16))
    # A declared type must equal the file's.
    obj["resources"]["r"]["initialValuesDataType"] = "UINT16"
    load_model_file(save(tmp_path, obj))
    obj["resources"]["r"]["initialValuesDataType"] = "FLOAT32"
    with pytest.raises(JsonFormError) as info:
        load_model_file(save(tmp_path, obj))
    assert info.value.json_path == "$.resources.r.initialValuesDataType"
    assert info.value.path == str(tmp_path / "model.json")


def test_npy_bool_loads_as_int8(tmp_path: Path) -> None:
    np.save(tmp_path / "b.npy", np.array([True, False, True]))
    r = model_from_json(
        {"resources": {"r": {"initialValues": {"sourcePath": "b.npy"}}}, "dispatchables": {}, "commands": []},
        base_dir=tmp_path,
    ).resources["r"]
    assert r.data_type == DataType.INT8
    np.testing.assert_array_equal(r.values(), np.array([1, 0, 1], np.int8))


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.array([{"a": 1}], dtype=object), "cannot read"),
        (np.arange(3, dtype=">f4"), "big-endian"),
        (np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)), "Fortran"),
        (np.zeros((0,), np.float32), "no elements"),
        (np.array(["a", "b"]), "no DML_TENSOR_DATA_TYPE"),
    ],
    ids=["pickle", "big_endian", "fortran", "empty", "strings"],
)
def test_npy_refusals(tmp_path: Path, array: np.ndarray, message: str) -> None:
    np.save(tmp_path / "x.npy", array, allow_pickle=True)
    obj = {
        "resources": {"r": {"initialValues": {"sourcePath": "x.npy"}}},
        "dispatchables": {},
        "commands": [],
    }
    with pytest.raises(JsonFormError, match=message) as info:
        model_from_json(obj, base_dir=tmp_path)
    assert info.value.json_path == "$.resources.r.initialValues.sourcePath"


def test_missing_npy(tmp_path: Path) -> None:
    obj = {
        "resources": {"r": {"initialValues": {"sourcePath": "nope.npy"}}},
        "dispatchables": {},
        "commands": [],
    }
    with pytest.raises(JsonFormError, match="not found"):
        model_from_json(obj, base_dir=tmp_path)


def test_size_in_bytes() -> None:
    assert resource([1, 2, 3], "UINT8", sizeInBytes=16).buffer_size_in_bytes == 16
    with pytest.raises(JsonFormError) as info:
        resource([1, 2, 3], "FLOAT32", sizeInBytes=8)
    assert info.value.json_path == "$.resources.r.sizeInBytes"


@pytest.mark.parametrize(
    ("obj", "data_type", "where", "shown"),
    [
        ([1, 2.0], "INT32", "$.resources.r.initialValues[1]", "2.0"),
        ([1, 300], "UINT8", "$.resources.r.initialValues[1]", "300"),
        ([-1], "UINT32", "$.resources.r.initialValues[0]", "-1"),
        ([1, "NaN"], "FLOAT32", "$.resources.r.initialValues[1]", "NaN"),
        (["nan"], "INT32", "$.resources.r.initialValues[0]", "nan"),
        ([1e39], "FLOAT32", "$.resources.r.initialValues[0]", "1e+39"),
        ([True], "UINT8", "$.resources.r.initialValues[0]", "true"),
        ([], "FLOAT32", "$.resources.r.initialValues", "non-empty"),
        ({"valueCount": 0, "value": 1}, "FLOAT32", "$.resources.r.initialValues.valueCount", "0"),
        ({"valueCount": 2.0, "value": 1}, "FLOAT32", "$.resources.r.initialValues.valueCount", "2.0"),
        ({"valueCount": 2, "valueStart": 1}, "FLOAT32", "$.resources.r.initialValues.valueDelta", "missing"),
        (
            {"valueCount": 2, "value": 1, "valueStart": 0},
            "FLOAT32",
            "$.resources.r.initialValues.valueStart",
            "unknown",
        ),
        ({"valueCount": 2}, "FLOAT32", "$.resources.r.initialValues", "expected one of"),
        ("deferred", "FLOAT32", "$.resources.r.initialValues", "'deferred'"),
        ({"valueCount": 2, "value": 1}, None, "$.resources.r.initialValuesDataType", "missing"),
        ([1], "UINT4", "$.resources.r.initialValuesDataType", "UINT4"),
        ([1], "FLOAT", "$.resources.r.initialValuesDataType", "FLOAT"),
    ],
)
def test_initial_value_errors(obj: Any, data_type: str | None, where: str, shown: str) -> None:
    with pytest.raises(JsonFormError) as info:
        resource(obj, data_type)
    assert info.value.json_path == where
    assert shown in str(info.value)


def test_nan_literal_and_duplicate_keys_are_not_json(tmp_path: Path) -> None:
    text = json.dumps(gather_elements_model()).replace("[1, 2, 3,", "[NaN, 2, 3,")
    (tmp_path / "m.json").write_text(text)
    with pytest.raises(BadModelError, match="NaN"):
        load_model_file(tmp_path / "m.json")
    (tmp_path / "d.json").write_text(
        '{"resources": {}, "resources": {}, "dispatchables": {}, "commands": []}'
    )
    with pytest.raises(BadModelError, match="duplicate key 'resources'"):
        load_model_file(tmp_path / "d.json")


# --- model structure errors ---------------------------------------------------------------------------


def _mutated(path: list[Any], value: Any = None, delete: bool = False) -> dict[str, Any]:
    obj = copy.deepcopy(gather_elements_model())
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "where", "shown"),
    [
        (
            _mutated(["dispatchables", "op", "type"], "DML_OPERATOR_CONVOLUTION"),
            "$.dispatchables.op.type",
            "CONVOLUTION",
        ),
        (
            {**gather_elements_model(), "dispatchables": {"op": {"type": "hlsl", "sourcePath": "x.hlsl"}}},
            "$.dispatchables.op.type",
            "hlsl",
        ),
        (_mutated(["dispatchables", "op", "desc", "Axis"], 0.0), "$.dispatchables.op.desc.Axis", "0.0"),
        (
            _mutated(["dispatchables", "op", "desc", "IndicesTensor", "Sizes", 1], 3.0),
            "$.dispatchables.op.desc.IndicesTensor.Sizes[1]",
            "3.0",
        ),
        (_mutated(["commands", 0, "bindings", "Input"], "input"), "$.commands[0].bindings.Input", "'Input'"),
        (
            _mutated(["commands", 0, "bindings", "IndicesTensor"], delete=True),
            "$.commands[0].bindings.IndicesTensor",
            "not bound",
        ),
        (
            _mutated(["commands", 0, "bindings", "OutputTensor"], "out"),
            "$.commands[0].bindings.OutputTensor",
            "'out'",
        ),
        (_mutated(["commands", 0, "dispatchable"], "gather"), "$.commands[0].dispatchable", "'gather'"),
        (_mutated(["commands", 1, "resource"], "result"), "$.commands[1].resource", "'result'"),
        (_mutated(["commands", 1, "dimensions"], [2, 3.0]), "$.commands[1].dimensions[1]", "3.0"),
        (_mutated(["commands", 1, "type"], "writefile"), "$.commands[1].type", "writefile"),
        (_mutated(["commands", 1, "target"], "x.npy"), "$.commands[1].target", "target"),
        (
            _mutated(["resources", "input", "initialValuesOffsetInBytes"], 4),
            "$.resources.input.initialValuesOffsetInBytes",
            "unknown",
        ),
        (_mutated(["commands"], delete=True), "$.commands", "missing"),
        (_mutated(["commands"], {}), "$.commands", "expected an array"),
    ],
    ids=[
        "unknown_op",
        "hlsl_op",
        "float_uint",
        "float_size",
        "binding_typo",
        "unbound",
        "no_resource",
        "no_dispatchable",
        "write_no_resource",
        "float_dimension",
        "command_type",
        "command_key",
        "resource_key",
        "no_commands",
        "commands_object",
    ],
)
def test_model_errors_name_the_json_path(tmp_path: Path, obj: dict[str, Any], where: str, shown: str) -> None:
    file = save(tmp_path, obj)
    with pytest.raises(JsonFormError) as info:
        load_model_file(file)
    assert info.value.json_path == where
    assert shown in str(info.value)
    assert str(file) in str(info.value)


def test_cli_reports_model_errors_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = save(tmp_path, _mutated(["dispatchables", "op", "type"], "DML_OPERATOR_CONVOLUTION"))
    assert main(["replay", str(file)]) == 2
    err = capsys.readouterr().err
    assert "$.dispatchables.op.type" in err and "DML_OPERATOR_CONVOLUTION" in err


# --- replay ---------------------------------------------------------------------------------------------


def test_replay_writes_relative_to_output_path_and_keeps_metadata(tmp_path: Path) -> None:
    file = save(tmp_path, gather_elements_model())
    assert load_model_file(file).metadata == {"provenance": {"tool": "test"}}
    result = replay(file, output_path=tmp_path / "results")
    (written,) = result.files
    assert written.path == (tmp_path / "results" / "out.npy").resolve()
    assert written.shape == (2, 3)
    np.testing.assert_array_equal(np.load(written.path), GATHER_ELEMENTS_EXPECTED)
    np.testing.assert_array_equal(result.outputs["output"], GATHER_ELEMENTS_EXPECTED)
    np.testing.assert_array_equal(result.buffers["output"], GATHER_ELEMENTS_EXPECTED.reshape(-1))
    np.testing.assert_array_equal(result.buffers["input"], np.arange(1, 10, dtype=np.float32))


def test_replay_writes_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = save(tmp_path, gather_elements_model())
    monkeypatch.chdir(tmp_path)
    replay(file)
    assert (tmp_path / "out.npy").is_file()


def test_write_file_dimensions_and_flat_padding(tmp_path: Path) -> None:
    obj = gather_elements_model()
    obj["commands"][1]["dimensions"] = [3, 2]
    obj["commands"].append({"type": "writeFile", "resource": "output", "targetPath": "flat.npy"})
    obj["resources"]["output"]["sizeInBytes"] = 32
    result = replay(save(tmp_path, obj), output_path=tmp_path)
    assert np.load(tmp_path / "out.npy").shape == (3, 2)
    flat = np.load(tmp_path / "flat.npy")
    # Without dimensions DxDispatch writes the whole buffer, padding included.
    np.testing.assert_array_equal(flat, [4, 8, 3, 7, 2, 3, 0, 0])
    assert [f.shape for f in result.files] == [(3, 2), (8,)]
    obj["commands"][1]["dimensions"] = [3, 3, 3]
    with pytest.raises(JsonFormError) as info:
        replay(save(tmp_path, obj), output_path=tmp_path)
    assert info.value.json_path == "$.commands[1].dimensions"


def test_strided_tensors_in_a_model(tmp_path: Path) -> None:
    # InputTensor reads the 3x3 buffer transposed (Strides [1,3]); OutputTensor writes every other element
    # of a 12-element buffer (Strides [6,2]).
    obj = gather_elements_model()
    desc = obj["dispatchables"]["op"]["desc"]
    desc["InputTensor"]["Strides"] = [1, 3]
    desc["OutputTensor"]["Strides"] = [6, 2]
    obj["resources"]["output"]["initialValues"] = {"valueCount": 12, "value": -1}
    obj["commands"][1]["dimensions"] = [12]
    result = replay(save(tmp_path, obj), output_path=tmp_path)
    data = np.arange(1, 10, dtype=np.float32).reshape(3, 3).T
    idx = np.array([[1, 2, 0], [2, 0, 0]])
    expected = np.take_along_axis(data, idx, axis=0)
    np.testing.assert_array_equal(result.outputs["output"], expected)
    buffer = np.load(tmp_path / "out.npy")
    np.testing.assert_array_equal(buffer[::2], expected.reshape(-1))
    np.testing.assert_array_equal(buffer[1::2], -1)


def test_buffers_are_reinterpreted_as_the_tensor_type(tmp_path: Path) -> None:
    obj = gather_elements_model()
    raw = np.arange(1, 10, dtype=np.float32).view(np.uint8)
    obj["resources"]["input"] = {"initialValuesDataType": "UINT8", "initialValues": raw.tolist()}
    result = replay(save(tmp_path, obj), output_path=tmp_path)
    np.testing.assert_array_equal(result.outputs["output"], GATHER_ELEMENTS_EXPECTED)


def test_buffer_smaller_than_tensor(tmp_path: Path) -> None:
    obj = gather_elements_model()
    obj["resources"]["input"]["initialValues"] = [1, 2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(JsonFormError) as info:
        replay(save(tmp_path, obj), output_path=tmp_path)
    assert info.value.json_path == "$.commands[0].bindings.InputTensor"
    assert "TotalTensorSizeInBytes 36" in str(info.value)


def test_invalid_descriptor_at_feature_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2-D tensors need FL 3_0; at 2_1 GATHER_ELEMENTS takes exactly 4 dimensions and UINT32 indices.
    file = save(tmp_path, gather_elements_model())
    with pytest.raises(InvalidDescriptorError):
        replay(file, output_path=tmp_path, feature_level=FeatureLevel.FL_2_1)
    assert main(["replay", str(file), "--output-path", str(tmp_path), "--feature-level", "2_1"]) == 2
    assert "DML_FEATURE_LEVEL_2_1" in capsys.readouterr().err
    assert main(["replay", str(file), "--output-path", str(tmp_path), "--feature-level", "3.0"]) == 0


def test_out_of_range_index_errors_or_clamps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = gather_elements_model()
    obj["resources"]["indices"]["initialValues"] = [1, 2, 0, 2, 0, 7]
    file = save(tmp_path, obj)
    with pytest.raises(IndexOutOfRangeError):
        replay(file, output_path=tmp_path)
    assert main(["replay", str(file), "--output-path", str(tmp_path)]) == 2
    capsys.readouterr()
    result = replay(file, output_path=tmp_path, index_mode=IndexMode.CLAMP)
    assert result.outputs["output"][1, 2] == 9
    # out.npy exists now (the replay above wrote it): the CLI replaces it only when asked.
    assert main(["replay", str(file), "--output-path", str(tmp_path), "--clamp-indices"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["replay", str(file), "--output-path", str(tmp_path), "--clamp-indices", "--overwrite"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy")[1], [7, 2, 9])


def test_two_write_files_on_one_target_replace_their_own_file(tmp_path: Path) -> None:
    obj = gather_elements_model()
    writes = [c for c in obj["commands"] if c["type"] == "writeFile"]
    obj["commands"] = obj["commands"] + writes  # the same target written twice in one replay
    file = save(tmp_path, obj)
    out = tmp_path / "out"
    result = replay(file, output_path=out)
    assert len(result.files) == 2 * len(writes)
    with pytest.raises(BadInputError, match="--overwrite"):
        replay(file, output_path=out)  # now the files are there from an earlier replay
    assert len(replay(file, output_path=out, overwrite=True).files) == 2 * len(writes)


def test_in_place_scatter_and_print(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One buffer bound as InputTensor and OutputTensor: reads see the values from before the dispatch.
    tensor = {"DataType": "INT32", "Sizes": [4]}
    obj = {
        "resources": {
            "data": {"initialValuesDataType": "INT32", "initialValues": [10, 20, 30, 40]},
            "indices": {"initialValuesDataType": "INT64", "initialValues": [-1, 0]},
            "updates": {"initialValuesDataType": "INT32", "initialValues": [7, 8]},
        },
        "dispatchables": {
            "scatter": {
                "type": "DML_OPERATOR_SCATTER_ELEMENTS",
                "desc": {
                    "InputTensor": tensor,
                    "IndicesTensor": {"DataType": "INT64", "Sizes": [2]},
                    "UpdatesTensor": {"DataType": "INT32", "Sizes": [2]},
                    "OutputTensor": tensor,
                    "Axis": 0,
                },
            }
        },
        "commands": [
            {"type": "print", "resource": "data"},
            {
                "type": "dispatch",
                "dispatchable": "scatter",
                "bindings": {
                    "InputTensor": "data",
                    "IndicesTensor": "indices",
                    "UpdatesTensor": "updates",
                    "OutputTensor": {"name": "data"},
                },
            },
            {"type": "print", "resource": "data"},
        ],
    }
    file = save(tmp_path, obj)
    result = replay(file)
    assert result.printed == ("Resource 'data': 10, 20, 30, 40", "Resource 'data': 8, 20, 30, 7")
    assert result.files == ()
    assert main(["replay", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "Resource 'data': 10, 20, 30, 40",
        "Dispatch 'scatter': done",
        "Resource 'data': 8, 20, 30, 7",
    ]


def test_python_m_dmlshim_replay(tmp_path: Path) -> None:
    model = REPO / "tests" / "seeds" / "gather_nd_example1" / "model.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim", "replay", str(model), "--output-path", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Resource 'output' written to" in proc.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "output.npy"), [[2, 3], [0, 1]])


# --- writing --------------------------------------------------------------------------------------------


def _scatter_desc() -> ScatterDesc:
    f16 = DataType.FLOAT16
    return ScatterDesc(
        BufferTensorDesc(f16, (2, 3)),
        BufferTensorDesc(DataType.INT64, (1, 3)),
        BufferTensorDesc(f16, (1, 3)),
        BufferTensorDesc(f16, (2, 3)),
        axis=0,
    )


def _scatter_inputs() -> dict[str, np.ndarray]:
    return {
        "InputTensor": np.array([[0.1, np.nan, np.inf], [-np.inf, 2, 3]], np.float16),
        "IndicesTensor": np.array([[1, 0, -1]], np.int64),
        "UpdatesTensor": np.array([[5, 6, 7]], np.float16),
    }


@pytest.mark.parametrize("npy_inputs", [False, True], ids=["inline", "npy"])
def test_single_operator_model_round_trip_and_replay(tmp_path: Path, npy_inputs: bool) -> None:
    desc = _scatter_desc()
    model = single_operator_model(
        desc, _scatter_inputs(), npy_inputs=npy_inputs, metadata={"node": "scatter_0"}, print_output=True
    )
    path = write_model_file(model, tmp_path / "case" / "model.json")
    text = path.read_text(encoding="utf-8")
    json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} literal written"))
    assert '"type": "DML_OPERATOR_SCATTER"' in text
    if npy_inputs:
        assert (tmp_path / "case" / "input.npy").is_file()
        assert np.load(tmp_path / "case" / "indices.npy").dtype == np.int64
    else:
        assert '"initialValues": [1, 0, -1]' in text  # integers stay JSON integers
        assert '"nan", "inf"' in text and '"-inf"' in text
    back = load_model_file(path)
    # NaN != NaN, so compare the JSON forms.
    assert back.to_json() == model.to_json()
    assert back.dispatchables == model.dispatchables and back.commands == model.commands
    result = replay(path, output_path=tmp_path / "out")
    expected = execute(desc, _scatter_inputs()).output
    np.testing.assert_array_equal(result.outputs["output"], expected)
    written = np.load(tmp_path / "out" / "output.npy")
    assert written.dtype == np.float16 and written.shape == (2, 3)
    np.testing.assert_array_equal(written, expected)


def test_model_dataclasses_to_json() -> None:
    desc = GatherElementsDesc(
        BufferTensorDesc(DataType.UINT8, (2, 2)),
        BufferTensorDesc(DataType.UINT32, (2, 2)),
        BufferTensorDesc(DataType.UINT8, (2, 2)),
        axis=1,
    )
    model = single_operator_model(
        desc,
        {
            "InputTensor": np.array([[True, False], [False, True]]),
            "IndicesTensor": np.zeros((2, 2), np.uint32),
        },
        execution_flags=("DISABLE_META_COMMANDS",),
    )
    obj = model.to_json()
    assert obj["resources"]["input"] == {
        "initialValuesDataType": "DML_TENSOR_DATA_TYPE_UINT8",
        "initialValues": [1, 0, 0, 1],
    }
    assert obj["resources"]["output"] == {
        "initialValuesDataType": "DML_TENSOR_DATA_TYPE_UINT8",
        "initialValues": {"valueCount": 4, "value": 0},
    }
    assert obj["dispatchables"]["op"]["executionFlags"] == "DISABLE_META_COMMANDS"
    assert obj["commands"][1] == {
        "type": "writeFile",
        "resource": "output",
        "targetPath": "output.npy",
        "dimensions": [2, 2],
    }
    assert model_from_json(obj) == model


def test_strided_input_buffer_and_explicit_size(tmp_path: Path) -> None:
    # A strided InputTensor whose TotalTensorSizeInBytes exceeds the data: the writer sets sizeInBytes.
    f32 = DataType.FLOAT32
    desc = GatherElementsDesc(
        BufferTensorDesc(f32, (2, 2), (1, 2), total_tensor_size_in_bytes=32),
        BufferTensorDesc(DataType.INT32, (2, 2)),
        BufferTensorDesc(f32, (2, 2)),
        axis=0,
    )
    inputs = {
        "InputTensor": np.array([1, 2, 3, 4], np.float32),
        "IndicesTensor": np.array([[1, 0], [0, 1]], np.int32),
    }
    model = single_operator_model(desc, inputs)
    assert model.resources["input"].size_in_bytes == 32
    result = replay(model.save(tmp_path / "m.json"), output_path=tmp_path)
    # Element (i, j) of the input is flat[i + 2j]: [[1, 3], [2, 4]].
    np.testing.assert_array_equal(result.outputs["output"], [[2, 3], [1, 4]])


def test_writer_refuses_broken_models() -> None:
    model = single_operator_model(_scatter_desc(), _scatter_inputs())
    dispatch = model.commands[0]
    assert isinstance(dispatch, DispatchCommand)
    with pytest.raises(JsonFormError, match="Updates"):
        DxDispatchModel(
            model.resources,
            model.dispatchables,
            (DispatchCommand("op", {**dispatch.bindings, "Updates": "updates"}),),
        )
    with pytest.raises(JsonFormError, match="no resource named 'nothing'"):
        DxDispatchModel(model.resources, model.dispatchables, (WriteFileCommand("nothing", "x.npy"),))
    with pytest.raises(BadInputError, match="InputTensor"):
        single_operator_model(_scatter_desc(), {})
