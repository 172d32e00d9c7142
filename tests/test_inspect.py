"""``dmlshim inspect``: text and JSON, exit codes, feature-level spellings, bad models, onnx_models/."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.cli.main import main
from tests.oracle import IR_VERSION

MODELS = sorted((Path(__file__).resolve().parents[1] / "onnx_models").glob("*.onnx"))
SIX_OPS = {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
NODE_KEYS = {
    "name",
    "op_type",
    "domain",
    "since_version",
    "status",
    "min_feature_level",
    "ort_placement",
    "operator",
    "reasons",
}


def _save(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto],
    opset: int = 16,
    name: str = "m.onnx",
) -> str:
    outputs = [onnx.ValueInfoProto(name=n.output[0]) for n in nodes[-1:]]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


@pytest.fixture
def all_dml(tmp_path: Path) -> str:
    return _save(
        tmp_path,
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=-1, name="ge")],
        [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4])],
        [helper.make_tensor("i", T.INT64, [2, 2], [0, 3, -1, 1])],
        name="ge.onnx",
    )


@pytest.fixture
def with_fallback(tmp_path: Path) -> str:
    return _save(
        tmp_path,
        [
            helper.make_node("Gather", ["x", "gi"], ["g"], axis=0, name="gather_0"),
            helper.make_node("ScatterND", ["g", "si", "su"], ["s"], reduction="add", name="scatter_add"),
        ],
        [helper.make_tensor_value_info("x", T.FLOAT, [5, 3])],
        [
            helper.make_tensor("gi", T.INT64, [2], [4, 0]),
            helper.make_tensor("si", T.INT64, [1, 1], [1]),
            helper.make_tensor("su", T.FLOAT, [1, 3], [1, 2, 3]),
        ],
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_with_fallback(capsys: pytest.CaptureFixture[str], with_fallback: str) -> None:
    code, out, _ = _run(capsys, with_fallback)
    assert code == 1
    assert "Gather/scatter nodes translated to DirectML: 1 of 2" in out
    assert "SCATTER_REDUCTION_UNSUPPORTED: 1" in out
    assert "gather_0" in out and "GATHER" in out and "scatter_add" in out
    assert (
        "  DirectML operators at DML_FEATURE_LEVEL_5_0: PARTIAL (1 of 2 translate to DirectML operators; "
        "1 fall back to the CPU)" in out
    )
    # The second question: reduction="add" has no DML kernel, so onnxruntime-directml runs it on the CPU.
    assert (
        "  onnxruntime-directml today: PARTIAL (1 of 2 on DmlExecutionProvider; 1 on CPUExecutionProvider"
        in out
    )
    # No sample inputs beside the model: validate draws them (no placeholder file name).
    assert f"Next: dmlshim validate {with_fallback} --feature-level 5_0" in out


def test_json_schema(capsys: pytest.CaptureFixture[str], with_fallback: str) -> None:
    code, out, _ = _run(capsys, with_fallback, "--json", "--feature-level", "3_0")
    assert code == 1
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["feature_level"] == "DML_FEATURE_LEVEL_3_0"
    gather, scatter = doc["nodes"]
    for node in doc["nodes"]:
        assert set(node) >= NODE_KEYS
        assert all({"code", "message"} <= set(r) for r in node["reasons"])
    assert gather["status"] == "dml" and gather["min_feature_level"] == "DML_FEATURE_LEVEL_1_0"
    assert gather["ort_placement"] == "DmlExecutionProvider"
    desc = gather["operator"]["desc"]
    assert gather["operator"]["type"] == "DML_OPERATOR_GATHER"
    assert desc["InputTensor"]["DataType"] == "DML_TENSOR_DATA_TYPE_FLOAT32"
    assert desc["InputTensor"]["Sizes"] == [5, 3] and desc["Axis"] == 0 and desc["IndexDimensions"] == 1
    assert scatter["status"] == "fallback" and scatter["operator"] is None
    assert scatter["ort_placement"] == "CPUExecutionProvider" and scatter["min_feature_level"] is None
    assert scatter["reasons"][0]["code"] == "SCATTER_REDUCTION_UNSUPPORTED"
    assert doc["summary"]["reasons"] == {"SCATTER_REDUCTION_UNSUPPORTED": 1}


@pytest.mark.parametrize("level", ["3_0", "3.0", "0x3000", "DML_FEATURE_LEVEL_3_0"])
def test_feature_level_spellings(capsys: pytest.CaptureFixture[str], with_fallback: str, level: str) -> None:
    _, out, _ = _run(capsys, with_fallback, "--json", "-l", level)
    assert json.loads(out)["feature_level"] == "DML_FEATURE_LEVEL_3_0"


def test_symbolic_dims_are_translated_from_ranks(capsys: pytest.CaptureFixture[str], all_dml: str) -> None:
    # x is [batch, 4]: the descriptor is decided from the ranks; Sizes carry the dimension's name.
    code, out, _ = _run(capsys, all_dml)
    assert code == 0 and "SHAPE_UNKNOWN" not in out and "SIZES_SYMBOLIC" in out
    assert "YES (every gather/scatter node translates to a DirectML operator; 1 with symbolic sizes" in out
    code, out, _ = _run(capsys, all_dml, "--json")
    node = json.loads(out)["nodes"][0]
    assert node["status"] == "dml" and node["operator"]["desc"]["Axis"] == 1
    assert node["plan"]["inputs"][0]["onnx_shape"] == ["batch", 4]
    # A concrete shape, by input name or by dimension name, gives the exact descriptor.
    for given in ("x=2,4", "batch=2"):
        code, out, _ = _run(capsys, all_dml, "--input-shape", given, "--json")
        assert code == 0
        node = json.loads(out)["nodes"][0]
        assert node["operator"]["desc"]["InputTensor"]["Sizes"] == [2, 4]
        assert "SIZES_SYMBOLIC" not in [r["code"] for r in node["reasons"]]
    code, out, _ = _run(capsys, all_dml, "--input-shape", "x=2,4", "-l", "2_1")
    assert code == 0 and "DML_FEATURE_LEVEL_2_1: YES" in out and "normalize_indices" in out


def _unknown_rank_model(tmp_path: Path, inputs: list[onnx.ValueInfoProto]) -> str:
    # Reshape to a shape read from a tensor of unknown length: onnx cannot know the rank of its output.
    return _save(
        tmp_path,
        [
            helper.make_node("Reshape", ["x", "new_shape"], ["r"], name="reshape"),
            helper.make_node("Gather", ["r", "i"], ["y"], axis=0, name="g"),
        ],
        inputs,
        [helper.make_tensor("i", T.INT64, [1], [0])],
        name="unknown_rank.onnx",
    )


def _unknown_rank_static_inputs(tmp_path: Path) -> str:
    # The shape comes from NonZero: its length is unknown although every graph input is static.
    return _save(
        tmp_path,
        [
            helper.make_node("NonZero", ["m"], ["nz"], name="nonzero"),
            helper.make_node("Reshape", ["nz", "flat"], ["new_shape"], name="flatten"),
            helper.make_node("Reshape", ["x", "new_shape"], ["r"], name="reshape"),
            helper.make_node("Gather", ["r", "i"], ["y"], axis=0, name="g"),
        ],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
            helper.make_tensor_value_info("m", T.BOOL, [6]),
        ],
        [helper.make_tensor("i", T.INT64, [1], [0]), helper.make_tensor("flat", T.INT64, [1], [-1])],
        name="unknown_rank_static.onnx",
    )


def test_next_hint_names_the_models_own_symbolic_dims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _unknown_rank_model(
        tmp_path,
        [
            helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq"]),
            helper.make_tensor_value_info("new_shape", T.INT64, ["n"]),
        ],
    )
    code, out, _ = _run(capsys, path)
    assert code == 1 and "SHAPE_UNKNOWN" in out
    nxt = out.splitlines()[-1]
    hint = ["--input-shape", "batch=1", "--input-shape", "seq=1", "--input-shape", "n=1"]
    assert nxt == f"Next: dmlshim inspect {path} {' '.join(hint)} --feature-level 5_0"
    assert "D0" not in out and "NAME=" not in out
    assert ": NO (0 of 1 translate to DirectML operators; 1 of unknown rank or type)" in out
    assert "fall back" not in out.split("Verdict:")[1]
    # The hint works: with n fixed, the rank of the Reshape output is known.
    code, out, _ = _run(capsys, path, *hint)
    assert code == 0 and "SHAPE_UNKNOWN" not in out


def test_next_hint_without_symbolic_inputs_suggests_validate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _unknown_rank_static_inputs(tmp_path)
    code, out, _ = _run(capsys, path)
    assert code == 1
    assert out.splitlines()[-1] == f"Next: dmlshim validate {path} --feature-level 5_0"
    assert "--input-shape" not in out.splitlines()[-1]


def test_descriptors_and_graph_values(capsys: pytest.CaptureFixture[str], with_fallback: str) -> None:
    code, out, _ = _run(capsys, with_fallback, "--descriptors")
    assert code == 1
    assert "Inputs:\n  x  float [5,3]\n" in out
    # s is declared without a type; ONNX shape inference gives ScatterND's output the data's [2,3].
    assert "Outputs:\n  s  float [2,3]\n" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("gather_0"))
    # Gather of [5, 3] by [2] on axis 0 (facts §5): D = max(2, 1, 2) = 2, Axis 0, IndexDimensions 1.
    assert "Axis=0 IndexDimensions=1 Input[5,3] FLOAT32 Indices[1,2] INT64 Output[2,3] FLOAT32" in row
    code, out, _ = _run(capsys, with_fallback, "--json")
    doc = json.loads(out)
    assert doc["inputs"] == [{"name": "x", "type": "float", "shape": [5, 3]}]
    assert doc["outputs"] == [{"name": "s", "type": "float", "shape": [2, 3]}]


def test_subgraph_node_named_with_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("ScatterElements", ["acc", "bi", "bu"], ["acc_out"], axis=0, name="scatter_1"),
        ],
        "body",
        [
            helper.make_tensor_value_info("it", T.INT64, []),
            helper.make_tensor_value_info("c", T.BOOL, []),
            helper.make_tensor_value_info("acc", T.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("c_out", T.BOOL, []),
            helper.make_tensor_value_info("acc_out", T.FLOAT, [4]),
        ],
        initializer=[
            helper.make_tensor("bi", T.INT64, [1], [3]),
            helper.make_tensor("bu", T.FLOAT, [1], [1.0]),
        ],
    )
    path = _save(
        tmp_path,
        [helper.make_node("Loop", ["n", "", "a"], ["out"], body=body, name="loop_node")],
        [helper.make_tensor_value_info("a", T.FLOAT, [4])],
        [helper.make_tensor("n", T.INT64, [], [3])],
    )
    code, out, err = _run(capsys, path, "--json")
    assert code == 0, err
    assert [n["name"] for n in json.loads(out)["nodes"]] == ["loop_node/body/scatter_1"]


@pytest.mark.parametrize("payload", [b"", b"not an onnx model at all", None])
def test_bad_model_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, with_fallback: str, payload: bytes | None
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(Path(with_fallback).read_bytes()[:40] if payload is None else payload)
    code, _, err = _run(capsys, str(bad))
    assert code == 2 and "bad.onnx" in err


def test_checker_failure_and_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, with_fallback: str
) -> None:
    # GatherElements does not exist at opset 10: onnx.checker rejects the model.
    path = _save(
        tmp_path,
        [helper.make_node("GatherElements", ["x", "i"], ["y"])],
        [helper.make_tensor_value_info("x", T.FLOAT, [2]), helper.make_tensor_value_info("i", T.INT64, [2])],
        [],
        opset=10,
        name="old.onnx",
    )
    code, _, err = _run(capsys, path)
    assert code == 2 and "old.onnx" in err and "onnx.checker" in err
    assert _run(capsys, with_fallback, "--input-shape", "nope=1")[0] == 2
    assert _run(capsys, with_fallback, "--input-shape", "x=a,b")[0] == 2
    with pytest.raises(SystemExit) as exc:
        main(["inspect", with_fallback, "-l", "7_7"])
    assert exc.value.code == 2


@pytest.mark.skipif(not MODELS, reason="onnx_models/ holds no models")
@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_every_shipped_model(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    code, text, _ = _run(capsys, str(model))
    assert code in (0, 1) and "Verdict:" in text
    code_json, out, _ = _run(capsys, str(model), "--json")
    assert code_json == code
    doc = json.loads(out)
    proto = onnx.load(str(model))

    def count(graph: onnx.GraphProto) -> int:
        n = 0
        for node in graph.node:
            n += node.op_type in SIX_OPS
            for attr in node.attribute:
                n += sum(count(g) for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs))
        return n

    assert len(doc["nodes"]) == count(proto.graph)
    assert (code == 0) == all(n["status"] == "dml" for n in doc["nodes"])
    for node in doc["nodes"]:
        assert set(node) >= NODE_KEYS
        assert (node["operator"] is not None) == (node["status"] == "dml")


def test_empty_indices_scatter_nd_warns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # facts §5: the DirectML provider takes the node, creates no operator for an empty tensor and returns
    # without writing the output.
    path = _save(
        tmp_path,
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="empty_scatter")],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", T.INT64, [0, 1]),
            helper.make_tensor_value_info("u", T.FLOAT, [0, 3]),
        ],
        [],
        opset=13,
    )
    code, out, _ = _run(capsys, path)
    assert code == 1
    assert "Warnings: onnxruntime's DirectML EP differs from ONNX here:\n  EP_OUTPUT_UNWRITTEN: 1" in out
    assert "[warning] EP_OUTPUT_UNWRITTEN" in out
    node = json.loads(_run(capsys, path, "--json")[1])["nodes"][0]
    assert node["ort_placement"] == "DmlExecutionProvider"
    assert [r["code"] for r in node["reasons"]] == ["EMPTY_TENSOR", "EP_OUTPUT_UNWRITTEN"]


def test_input_shape_reaches_the_outputs_block(capsys: pytest.CaptureFixture[str]) -> None:
    # gather_beam_reorder_dynamic: past_keys [beams,2,5,8] gathered along beams by beam_idx [beams].
    model = str(Path(__file__).resolve().parents[1] / "onnx_models" / "gather_beam_reorder_dynamic.onnx")
    code, text, _ = _run(capsys, model, "--input-shape", "beams=3")
    assert code == 0
    block = text.split("Outputs:", 1)[1].split("\n\n", 1)[0]
    assert "reordered_keys  float [3,2,5,8]" in block, block
    code, text, _ = _run(capsys, model)
    assert "reordered_keys  float [beams,2,5,8]" in text.split("Outputs:", 1)[1]
