"""validate at polygraphy's level: saved inputs and outputs, reference outputs from a file (.npz or
polygraphy JSON), per-output tolerances, error statistics, --only-problems. Expected values come from
onnxruntime CPU (tests/oracle.py) or are computed by hand in the test."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from dmlshim.cli.main import main
from dmlshim.errors import BadInputError
from dmlshim.fileio.npz import load_npz
from dmlshim.validate.statistics import error_statistics
from dmlshim.validate.tolerances import parse_tolerances
from tests.oracle import ort_run

MODEL = Path(__file__).resolve().parents[1] / "onnx_models" / "tiny_decoder_step.onnx"
SAMPLE = MODEL.with_suffix(".npz")


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["validate", str(MODEL), "--inputs", str(SAMPLE), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _expected() -> dict[str, np.ndarray]:
    model = onnx.load(str(MODEL))
    feeds = load_npz(SAMPLE)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ort_run(model, feeds), strict=True))


def _polygraphy_array(arr: np.ndarray) -> dict[str, str]:
    # polygraphy's encoding: the base64 of numpy's .npy bytes, tagged with its class.
    buffer = io.BytesIO()
    np.save(buffer, arr, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}


def test_saved_inputs_and_outputs_are_the_run_and_onnxruntimes_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _validate(
        capsys, "--save-inputs", str(tmp_path / "in.npz"), "--save-outputs", str(tmp_path / "out.json")
    )
    assert code == 0, out
    saved_in = load_npz(tmp_path / "in.npz")
    sample = load_npz(SAMPLE)
    assert saved_in.keys() == sample.keys()
    for name in sample:
        np.testing.assert_array_equal(saved_in[name], sample[name])
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["polygraphy_class"] == "RunResults" and doc["lst"][0][0] == "dmlshim"
    outputs = doc["lst"][0][1][0]["outputs"]
    for name, expected in _expected().items():
        encoded = outputs[name]["values"]["array"]
        got = np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False)
        np.testing.assert_array_equal(got, expected)


def test_reference_outputs_decide_the_verdict_with_per_output_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _expected()
    reference["candidate_logprobs"] = reference["candidate_logprobs"] + np.float32(1e-3)
    np.savez(tmp_path / "ref.npz", **reference)
    code, out, _ = _validate(capsys, "--reference-outputs", str(tmp_path / "ref.npz"))
    assert code == 1
    assert "MISMATCH in output 'candidate_logprobs' against" in out
    assert "passes with atol" in out
    code, out, _ = _validate(
        capsys,
        "--reference-outputs",
        str(tmp_path / "ref.npz"),
        "--atol",
        "candidate_logprobs:2e-3",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0 and doc["match"] is True
    ext = {o["name"]: o["reference_outputs"] for o in doc["outputs"]}
    assert ext["candidate_logprobs"]["atol"] == 2e-3
    assert ext["candidate_logprobs"]["statistics"]["max_abs"] == pytest.approx(1e-3, rel=1e-2)
    assert ext["candidate_ids"]["max_abs_diff"] == 0
    assert doc["tolerances"] == {"candidate_logprobs": {"rtol": 0.0, "atol": 2e-3}}


def test_polygraphy_runresults_file_is_a_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _expected()
    iteration = {
        "outputs": {
            name: {"values": _polygraphy_array(value), "polygraphy_class": "LazyArray"}
            for name, value in expected.items()
        },
        "runtime": 0.001,
        "runner_name": "onnxrt-runner-N0",
        "polygraphy_class": "IterationResult",
    }
    doc = {"lst": [["onnxrt-runner-N0", [iteration]]], "polygraphy_class": "RunResults"}
    (tmp_path / "outputs.json").write_text(json.dumps(doc))
    inputs = [{name: _polygraphy_array(value) for name, value in load_npz(SAMPLE).items()}]
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    code = main(
        ["validate", str(MODEL), "--inputs", str(tmp_path / "inputs.json"),
         "--reference-outputs", str(tmp_path / "outputs.json")]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert "against reference outputs" in out


def test_missing_reference_output_is_a_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reference = _expected()
    reference.pop("new_key_cache")
    np.savez(tmp_path / "ref.npz", **reference)
    code, out, _ = _validate(capsys, "--reference-outputs", str(tmp_path / "ref.npz"))
    assert code == 1 and "not in the reference outputs file" in out


def test_only_problems_lists_the_differing_output_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _expected()
    reference["new_value_cache"] = reference["new_value_cache"] * np.float32(2) + np.float32(1)
    np.savez(tmp_path / "ref.npz", **reference)
    code, out, _ = _validate(capsys, "--reference-outputs", str(tmp_path / "ref.npz"), "--only-problems")
    assert code == 1
    section = out.split("against reference outputs", 1)[1]
    assert "new_value_cache" in section and "candidate_ids" not in section


def test_unknown_output_in_tolerance_and_existing_save_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _validate(capsys, "--atol", "nope:1e-3")
    assert code == 2 and "not outputs of the model" in err and "candidate_ids" in err
    (tmp_path / "o.npz").write_bytes(b"x")
    code, _, err = _validate(capsys, "--save-outputs", str(tmp_path / "o.npz"))
    assert code == 2 and "--overwrite" in err


def test_tolerance_parsing() -> None:
    t = parse_tolerances(["1e-4", "out:0:0.5"], ["x:2"])
    assert (t.rtol, t.atol, t.given) == (1e-4, 0.0, True)
    assert t.for_output("out:0") == (0.5, 0.0) and t.for_output("x") == (1e-4, 2.0)
    for bad in (["-1"], ["nan"], ["a:b"], [":1"]):
        with pytest.raises(BadInputError):
            parse_tolerances(bad, None)


def test_error_statistics_by_hand() -> None:
    actual = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    expected = np.array([1.0, 2.5, 2.0], dtype=np.float32)
    s = error_statistics(actual, expected)
    assert s is not None
    # |diff| = [0, 0.5, 2]; relative = [0, 0.2, 1]
    assert (s.max_abs, s.median_abs, s.max_rel) == (2.0, 0.5, 1.0)
    assert s.mean_abs == pytest.approx(2.5 / 3) and s.mean_rel == pytest.approx(0.4)
    assert (s.over_tolerance, s.min_atol, s.min_rtol) == (2, 2.0, 1.0)
    s = error_statistics(actual, expected, rtol=0.5)
    assert s is not None
    # allowed = 0.5 * |expected| = [0.5, 1.25, 1.0]: only the last element is over; it needs atol 1.0
    assert (s.over_tolerance, s.min_atol) == (1, 1.0)
    nan = error_statistics(np.array([np.nan, 1.0]), np.array([np.nan, np.nan]))
    assert nan is not None and nan.max_abs == np.inf and nan.median_abs == pytest.approx(np.inf)
    ints = error_statistics(np.array([1, 5]), np.array([1, 2]))
    assert ints is not None and ints.max_abs == 3.0 and ints.min_atol == np.inf


def _dropout_gather_model(train: bool = True) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    from tests.oracle import IR_VERSION

    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "train"], ["d"], name="dropout"),
        helper.make_node("Gather", ["d", "idx"], ["y"], name="gather", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "dropout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5]),
            helper.make_tensor("train", TensorProto.BOOL, [], [train]),
            helper.make_tensor("idx", TensorProto.INT64, [4], [3, 0, 63, 7]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_random_nodes_are_named_and_not_blamed_on_gathers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dropout.onnx"
    onnx.save(_dropout_gather_model(), str(path))
    code = main(["validate", str(path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "RANDOM_NODE" in {w["code"] for w in doc["warnings"]}
    assert [w["node"] for w in doc["warnings"] if w["code"] == "RANDOM_NODE"] == ["dropout"]
    if code == 1:  # onnxruntime's Dropout drew other elements in the two runs (nearly always)
        (out,) = doc["outputs"]
        assert out["suspect_nodes"] == []
        assert out["whole_model"] is None or out["whole_model"]["cause"] in ("unexplained", "identical")
    # In eval mode (training_mode a constant False) Dropout copies its input: no warning, a match.
    onnx.save(_dropout_gather_model(train=False), str(path))
    assert main(["validate", str(path), "--json"]) == 0
    assert "RANDOM_NODE" not in {w["code"] for w in json.loads(capsys.readouterr().out)["warnings"]}


def test_run_with_ort_values_outputs_own_their_memory() -> None:
    import onnxruntime as ort

    import dmlshim

    model = MODEL.parent / "gather_beam_reorder_dynamic.onnx"
    feeds = load_npz(model.with_suffix(".npz"))
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    session = dmlshim.InferenceSession(str(model))
    names = [o.name for o in session.get_outputs()]
    values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    for _ in range(20):
        got = session.run_with_ort_values(names, values)[0].numpy()
        np.testing.assert_array_equal(got, expected[0])
