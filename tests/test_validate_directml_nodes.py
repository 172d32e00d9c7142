"""validate --engine directml: differences beyond tolerance attributed node by node, each gather/scatter node
run by dmlshim on real DirectML's own inputs (dmlshim.validate.directml_nodes).

The unit tests stand in for real DirectML with onnxruntime CPU (single-threaded), whose node values are the
authority dmlshim's kernels must reproduce, then tamper with what that "device" returns; the tests marked
``real`` run DirectML itself under Wine and are skipped without the stack."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.directml.stack import stack_available
from dmlshim.report.validate_report import render_text
from dmlshim.validate import directml_nodes as dn
from dmlshim.validate import validate_model
from dmlshim.validate.results import ValidationReport
from tests.oracle import IR_VERSION, ort_run

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _model() -> onnx.ModelProto:
    """x -> ReduceSum -> Gather (float) -> y; x -> ArgMax -> Gather of an int64 table (int) -> z."""
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "ax"),
        numpy_helper.from_array(np.array([3, 0, 7, 7, 1], np.int64), "idx"),
        numpy_helper.from_array(np.arange(100, 4196, dtype=np.int64), "table"),
    ]
    nodes = [
        helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0),
        helper.make_node("Gather", ["s", "idx"], ["y"], axis=0, name="g_float"),
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
        helper.make_node("Gather", ["table", "am"], ["z"], axis=0, name="g_int"),
    ]
    graph = helper.make_graph(
        nodes,
        "attrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4096])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [5]),
            helper.make_tensor_value_info("z", TensorProto.INT64, [8]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return model


def _feeds() -> dict[str, np.ndarray]:
    """Sums that cancel: their float result depends on the order of the additions (DirectML's differs)."""
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((8, 2048)) * 1e4).astype(np.float32)
    x = np.concatenate([a, -a[:, ::-1]], axis=1) + rng.standard_normal((8, 4096)).astype(np.float32) * 1e-3
    return {"x": rng.permuted(x, axis=1).astype(np.float32)}


def _fake_device(tamper: Mapping[str, Any] | None = None) -> Any:
    """A stand-in for real DirectML: onnxruntime CPU's values, with ``tamper`` replacing some."""

    def run(
        model: onnx.ModelProto, names: list[str], feeds: Mapping[str, Any], level: Any, opt_level: str
    ) -> dict[str, Any]:
        augmented = onnx.ModelProto()
        augmented.CopyFrom(model)
        del augmented.graph.output[:]
        augmented.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
        values = dict(zip(names, ort_run(augmented, feeds), strict=True))
        for name, change in (tamper or {}).items():
            values[name] = change(values[name])
        return values

    return run


def _differing_report(tmp_path: Path) -> ValidationReport:
    """A report as validate --engine directml makes it when y differs beyond tolerance."""
    path = tmp_path / "attrib.onnx"
    onnx.save(_model(), path)
    report = validate_model(str(path), inputs=_feeds(), engine="cpu")
    outputs = tuple(
        dataclasses.replace(o, match=False, max_abs_diff=0.375) if o.name == "y" else o
        for o in report.outputs
    )
    return dataclasses.replace(report, engine="directml", match=False, outputs=outputs)


def test_every_node_reproducing_the_device_makes_a_match_naming_the_first_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dn, "_real_directml_values", _fake_device())
    report = dn.attribute_directml(_differing_report(tmp_path))
    assert report.match and report.exit_code == 0
    check = report.directml_nodes
    assert [(n.node, n.reproduced) for n in check.nodes] == [("g_float", True), ("g_int", True)]
    assert "MATCH for the gather/scatter nodes" in check.text
    assert "float arithmetic in other ops (first: y, max |diff| 0.375)" in check.text
    assert f"verdict: {check.text}" in render_text(report)
    document = report.to_json()
    assert document["match"] is True
    assert document["directml_nodes"]["verdict"] == "match"
    assert document["directml_nodes"]["first_output"] == "y"
    json.dumps(document)


def test_an_integer_output_off_by_one_names_the_node_and_stays_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        dn, "_real_directml_values", _fake_device({"z": lambda z: z + np.int64(z == z.max())})
    )
    report = dn.attribute_directml(_differing_report(tmp_path))
    assert not report.match and report.exit_code == 1
    check = report.directml_nodes
    assert [n.node for n in check.failing] == ["g_int"]
    assert "1 of 2 gather/scatter node(s)" in check.text and "g_int" in check.text
    assert "differs from DirectML's output exactly" in check.failing[0].detail
    assert report.to_json()["directml_nodes"]["verdict"] == "mismatch"


def test_floats_compare_within_the_dtype_tolerance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_ulp = _fake_device({"y": lambda y: np.nextafter(y, np.float32(np.inf))})
    monkeypatch.setattr(dn, "_real_directml_values", one_ulp)
    assert dn.attribute_directml(_differing_report(tmp_path)).match
    far = _fake_device({"y": lambda y: y + np.float32(1.0)})
    monkeypatch.setattr(dn, "_real_directml_values", far)
    report = dn.attribute_directml(_differing_report(tmp_path))
    assert not report.match
    assert [n.node for n in report.directml_nodes.failing] == ["g_float"]


def test_a_failed_extra_run_is_said_and_keeps_the_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> dict[str, Any]:
        raise OSError("the host went away")

    monkeypatch.setattr(dn, "_real_directml_values", broken)
    report = dn.attribute_directml(_differing_report(tmp_path))
    assert not report.match
    assert "could not be attributed: the host went away" in report.directml_nodes.text


def test_other_engines_and_matching_reports_are_left_alone(tmp_path: Path) -> None:
    report = _differing_report(tmp_path)
    assert dn.check_directml_nodes(dataclasses.replace(report, engine="cpu")) is None
    assert dn.check_directml_nodes(dataclasses.replace(report, match=True)) is None


@real
def test_real_directml_sum_order_difference_is_attributed_to_reduce_sum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, feeds = _model(), _feeds()
    path, inputs = tmp_path / "attrib.onnx", tmp_path / "attrib.npz"
    onnx.save(model, path)
    np.savez(inputs, **feeds)
    cpu_y = ort_run(model, feeds)[0]
    code = main(["validate", str(path), "--inputs", str(inputs), "--engine", "directml", "--json"])
    document = json.loads(capsys.readouterr().out)
    y = next(o for o in document["outputs"] if o["name"] == "y")
    # DirectML sums in another order: y is beyond float32's tolerance from onnxruntime CPU's
    assert y["match"] is False and y["max_abs_diff"] > 1e-3 * float(np.abs(cpu_y).max())
    assert code == 0 and document["match"] is True
    check = document["directml_nodes"]
    assert check["verdict"] == "match" and check["first_output"] == "y"
    assert [(n["node"], n["reproduced"]) for n in check["nodes"]] == [("g_float", True), ("g_int", True)]


def test_nodes_left_unchecked_are_counted_in_the_line() -> None:
    nodes = (
        dn.NodeCheck("g", "Gather", True, "reproduces DirectML's output exactly"),
        dn.NodeCheck("h", "Gather", None, "not emulated (status fallback): onnxruntime runs it on the CPU"),
    )
    check = dn.DirectMLNodeCheck(nodes, "y", 0.5, nested=2)
    assert check.reproduced
    assert "each of the 1 gather/scatter node(s) checked" in check.text
    assert "(1 not checked: --json says why; 2 inside subgraphs not checked)" in check.text
    assert check.to_json()["nested_not_checked"] == 2


def test_the_model_validate_read_is_reused_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dmlshim.execute.weights.model_source import load_model

    report = _differing_report(tmp_path)
    report = dataclasses.replace(report, loaded=load_model(report.model, weightless=True))

    def no_second_read(*_: Any, **__: Any) -> Any:
        raise AssertionError("the model was read again")

    monkeypatch.setattr(onnx, "load", no_second_read)
    monkeypatch.setattr(onnx, "load_model", no_second_read)
    monkeypatch.setattr("dmlshim.execute.weights.model_source.load_model", no_second_read)
    monkeypatch.setattr(dn, "_real_directml_values", _fake_device())
    checked = dn.attribute_directml(report)
    assert checked.match
    reproduced = [(n.node, n.reproduced) for n in checked.directml_nodes.nodes]
    assert reproduced == [("g_float", True), ("g_int", True)]


def test_constants_and_initializers_are_taken_from_the_model_never_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime-directml gives an initializer made a graph output back as freed memory (or dies):
    the extra outputs are node-computed values only; Constants (any form) come from the model."""
    model = _model()
    graph = model.graph
    del graph.initializer[1]  # idx, now a Constant in its value_ints form
    graph.node.insert(0, helper.make_node("Constant", [], ["idx"], value_ints=[3, 0, 7, 7, 1]))
    path = tmp_path / "attrib_const.onnx"
    onnx.save(model, path)
    report = validate_model(str(path), inputs=_feeds(), engine="cpu")
    outputs = tuple(dataclasses.replace(o, match=False, max_abs_diff=0.375) for o in report.outputs)
    report = dataclasses.replace(report, engine="directml", match=False, outputs=outputs)
    fetched: list[str] = []
    device = _fake_device()

    def recording(model: onnx.ModelProto, names: list[str], *rest: Any) -> dict[str, Any]:
        fetched.extend(names)
        return device(model, names, *rest)  # type: ignore[no-any-return]

    monkeypatch.setattr(dn, "_real_directml_values", recording)
    checked = dn.attribute_directml(report)
    assert sorted(fetched) == ["am", "s", "y", "z"]
    assert checked.match
    reproduced = [(n.node, n.reproduced) for n in checked.directml_nodes.nodes]
    assert reproduced == [("g_float", True), ("g_int", True)]


def test_inputs_no_node_could_have_run_on_make_the_attribution_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keypoint R-CNN's extra run handed back indices hundreds of millions past their axis for Gathers
    DirectML had run: the values handed back are not what ran, so no node is blamed and the mismatch
    stands."""
    garbage = _fake_device({"am": lambda am: am + np.int64(380741200)})
    monkeypatch.setattr(dn, "_real_directml_values", garbage)
    report = dn.attribute_directml(_differing_report(tmp_path))
    assert not report.match and report.exit_code == 1
    check = report.directml_nodes
    assert check.error is not None and "no node is blamed" in check.error and "g_int" in check.error
    assert check.text.startswith("real DirectML's differing outputs could not be attributed")
    assert report.to_json()["directml_nodes"]["verdict"] == "mismatch"
