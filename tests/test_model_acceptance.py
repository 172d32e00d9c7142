"""onnxruntime decides what loads: every form onnxruntime runs (though onnx.checker refuses it) is run by
every command and both engines with onnxruntime CPU's outputs; every model onnxruntime refuses is refused
with exit 2 / BadModelError naming the node and the rule."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from dmlshim import BadModelError, InferenceSession
from dmlshim.model.modelcheck import check_model
from tests import acceptance_models as am
from tests.fuzz_settings import assert_cli_error, run_cli
from tests.oracle import ort_run

REPO = Path(__file__).resolve().parents[1]
ENGINES = ["partitioned"]
if importlib.util.find_spec("onnxruntime_extensions") is not None:
    ENGINES.append("customop")

FORMS: dict[str, Callable[[], am.Built]] = {
    "ir3 initializer not an input": am.ir3_initializer_not_input,
    "input without a shape": am.shapeless_input,
    "nodes out of order": am.unsorted_nodes,
    "bare type annotations": am.bare_type_annotations,
    "sparse initializer": am.sparse_table,
}


def _bits(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == e.tobytes()


def _save(tmp_path: Path, name: str, built: am.Built) -> tuple[Path, Path]:
    model, feeds = built
    path = tmp_path / f"{name.replace(' ', '_')}.onnx"
    onnx.save(model, path)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **feeds)
    return path, inputs


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("form", list(FORMS))
def test_session_runs_what_onnxruntime_runs(tmp_path: Path, form: str, engine: str) -> None:
    model, feeds = FORMS[form]()
    expected = ort_run(model, feeds)
    path, _ = _save(tmp_path, form, (model, feeds))
    for source in (path, model.SerializeToString(), model):
        session = InferenceSession(source, engine=engine)
        _bits(session.run(None, feeds), expected)
        record = session.last_run_record
        assert record is not None and record.nodes
        if engine == "partitioned":  # every gather/scatter node ran from its DirectML descriptor
            assert all(n.placement == "dml" for n in record.nodes), record.nodes


@pytest.mark.parametrize("form", list(FORMS))
def test_cli_runs_what_onnxruntime_runs(tmp_path: Path, form: str) -> None:
    model, feeds = FORMS[form]()
    path, inputs = _save(tmp_path, form, (model, feeds))
    out = tmp_path / "out.npz"
    r = run_cli("run", path, "--inputs", inputs, "-o", out)
    assert r.code == 0, r.err
    with np.load(out) as data:
        _bits([data[o.name] for o in model.graph.output], ort_run(model, feeds))
    r = run_cli("validate", path, "--inputs", inputs)
    assert r.code == 0, r.err + r.out
    if form == "input without a shape":
        # unknown rank: no shape can be generated, and the message says how to give one
        r = run_cli("validate", path)
        assert_cli_error(r.code, r.err, "'x'", "unknown rank", "--input-shape x=")
        r = run_cli("validate", path, "--input-shape", "x=2,5")
    else:
        r = run_cli("validate", path)  # generated inputs
    assert r.code == 0, r.err + r.out
    r = run_cli("inspect", path)
    # 1 only when a shape stays unknown without inputs (the shapeless input); never refused
    assert r.code == (1 if form == "input without a shape" else 0), r.err + r.out
    assert "Traceback" not in r.err


def test_onnx_checker_findings_are_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    model, _ = am.ir3_initializer_not_input()
    with pytest.raises(onnx.checker.ValidationError, match="not in graph input"):
        onnx.checker.check_model(model)
    with caplog.at_level(logging.WARNING, logger="dmlshim.model.modelcheck"):
        check_model(model)
    assert "not in graph input" in caplog.text and "onnxruntime loads the model" in caplog.text


def test_unsorted_nodes_keep_the_names_onnxruntime_reports(tmp_path: Path) -> None:
    model, feeds = am.unsorted_nodes()
    session = InferenceSession(model)
    _bits(session.run(None, feeds), ort_run(model, feeds))
    record = session.last_run_record
    assert record is not None
    assert sorted(n.name for n in record.nodes) == ["gather_last", "scatter_middle"]
    assert all(n.placement == "dml" for n in record.nodes), record.nodes
    assert [n.name for n in model.graph.node] == ["gather_last", "scatter_middle", ""]  # caller's model kept
    # The unnamed Relu is reported as onnxruntime's profile names it: by its index in the file.
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    ours = InferenceSession(model, so)
    ours.run(None, feeds)
    assert "Relu_2" in Path(ours.end_profiling()).read_text()


def test_python_m_dmlshim_runs_an_ir3_model(tmp_path: Path) -> None:
    path, inputs = _save(tmp_path, "ir3", am.ir3_initializer_not_input())
    env = dict(os.environ, PYTHONPATH=str(REPO / "provider"))
    for command in (["run", "--inputs", str(inputs)], ["validate", "--inputs", str(inputs)], ["inspect"]):
        proc = subprocess.run(
            [sys.executable, "-m", "dmlshim", command[0], str(path), *command[1:]],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


# --- external data ---------------------------------------------------------------------------------


def _external(folder: Path, location: str = "w.bin") -> tuple[Path, dict[str, np.ndarray], onnx.ModelProto]:
    model, feeds = am.external_weights_model()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=0)
    return path, feeds, model


def test_external_data_through_a_link_inside_the_folder(tmp_path: Path) -> None:
    path, feeds, _ = _external(tmp_path / "m" / "sub")
    model, _ = am.external_weights_model()  # onnx.save made the other copy's weight external
    top = tmp_path / "m"
    (top / "m.onnx").write_bytes(path.read_bytes())
    os.symlink("sub/w.bin", top / "w.bin")  # the model's location, a link to a file in the same folder
    linked = top / "m.onnx"
    expected = list(ort.InferenceSession(str(linked), providers=["CPUExecutionProvider"]).run(None, feeds))
    _bits(expected, ort_run(model, feeds))
    for engine in ENGINES:
        _bits(InferenceSession(linked, engine=engine).run(None, feeds), expected)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    for command in ("run", "validate"):
        r = run_cli(command, linked, "--inputs", inputs)
        assert r.code == 0, r.err
    assert run_cli("inspect", linked).code == 0


def test_external_data_through_a_link_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    path, _, _ = _external(tmp_path / "elsewhere")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "m.onnx").write_bytes(path.read_bytes())
    os.symlink(tmp_path / "elsewhere" / "w.bin", folder / "w.bin")
    with pytest.raises(Exception, match=r"escapes (both )?model directory"):
        ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"])
    r = run_cli("run", folder / "m.onnx")
    assert_cli_error(r.code, r.err, "'w'", "outside the model's folder")


def _supplied_options(values: dict[str, np.ndarray]) -> tuple[ort.SessionOptions, list[ort.OrtValue]]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    held = [ort.OrtValue.ortvalue_from_numpy(v) for v in values.values()]  # onnxruntime does not hold them
    so.add_external_initializers(list(values), held)
    return so, held


@pytest.mark.parametrize("file_present", [False, True])
def test_add_external_initializers_replace_the_file(tmp_path: Path, file_present: bool) -> None:
    path, feeds, _ = _external(tmp_path / "m")
    if not file_present:
        (tmp_path / "m" / "w.bin").unlink()
    weight = np.full((3, 4), 5.0, np.float32)
    so, held = _supplied_options({"w": weight})
    expected = list(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds))
    assert expected[0][0, 0] == weight[2, 0] + feeds["x"][2, 0]  # the options' value, not the file's
    for engine in ENGINES:
        session = InferenceSession(path, so, engine=engine)
        _bits(session.run(None, feeds), expected)
    assert len(held) == 1


def test_external_data_neither_supplied_nor_present_is_refused(tmp_path: Path) -> None:
    path, _, _ = _external(tmp_path / "m")
    (tmp_path / "m" / "w.bin").unlink()
    so = ort.SessionOptions()
    with pytest.raises(Exception, match=r"does not exist|No such file"):
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    with pytest.raises(BadModelError) as info:
        InferenceSession(path, so)
    assert info.value.tensor == "w" and "w.bin" in str(info.value)


# --- refused as onnxruntime refuses ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "run", "validate", "export", "lower"])
def test_scatter_at_opset_11_is_refused_by_every_command(tmp_path: Path, command: str) -> None:
    model = am.scatter_at_opset(11)
    with pytest.raises(Exception, match="deprecated"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    path = tmp_path / "scatter11.onnx"
    onnx.save(model, path)
    extra = ["-o", tmp_path / "out"] if command in ("export", "lower") else []
    r = run_cli(command, path, *extra)
    assert_cli_error(r.code, r.err, str(path), "'old_scatter'", "Scatter", "opset 11", "ScatterElements")


def test_scatter_at_opset_10_still_runs() -> None:
    model = am.scatter_at_opset(10)
    feeds = {
        "d": np.arange(9, dtype=np.float32).reshape(3, 3),
        "i": np.array([[2, 0, 1]], dtype=np.int64),
        "u": np.array([[-1, -2, -3]], dtype=np.float32),
    }
    for engine in ENGINES:
        _bits(InferenceSession(model, engine=engine).run(None, feeds), ort_run(model, feeds))


def test_a_refusal_names_node_and_rule_in_one_paragraph(tmp_path: Path) -> None:
    model, _ = am.unsorted_nodes()
    model.graph.node[0].input[1] = "no_such_value"  # onnxruntime: not an input, initializer or output
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(Exception, match="no_such_value"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for command in ("inspect", "run", "validate"):
        r = run_cli(command, path)
        assert_cli_error(
            r.code, r.err, str(path), "no_such_value", "onnxruntime cannot load the model", "rule:"
        )
    with pytest.raises(BadModelError) as info:
        InferenceSession(path)
    assert info.value.rule is not None and info.value.path == str(path)


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_extensions") is None, reason="needs onnxruntime-extensions"
)
def test_custom_operators_registered_in_the_options_load_as_in_onnxruntime() -> None:
    from onnx import TensorProto, helper
    from onnxruntime_extensions import get_library_path

    from tests.oracle import IR_VERSION

    contrib = "ai.onnx.contrib"
    graph = helper.make_graph(
        [
            helper.make_node("Inverse", ["x"], ["inv"], domain=contrib, name="inv"),
            helper.make_node("Gather", ["inv", "i"], ["y"], axis=0, name="pick"),
        ],
        "custom",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(contrib, 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
    feeds = {"x": np.diag([2.0, 4.0, 8.0]).astype(np.float32), "i": np.array([2, 0], dtype=np.int64)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.register_custom_ops_library(get_library_path())
    expected = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session = InferenceSession(model, so)
    _bits(session.run(None, feeds), list(expected.run(None, feeds)))
    with pytest.raises(BadModelError) as info:  # without the library, onnxruntime refuses it too
        InferenceSession(model)
    assert info.value.node == "inv"
