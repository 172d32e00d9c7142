"""What a new user meets first: errors that point at the right fix, and help that lists every action.

An out-of-range index held in the model itself (an initializer, or computed from constants only) cannot be
fixed by other inputs, so the error says so instead of only suggesting ``--inputs``/``--input-shape``.
onnxruntime's CPU provider is the authority that the model is bad in the first place.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from dmlshim.inputs.search import input_free_values


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def _constant_index_model(path: Path) -> Path:
    """Gather with indices [1, 7] into a dimension of 5, the 7 made from constants only (Add of two)."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["base", "step"], ["idx"], name="make_idx"),
            helper.make_node("Gather", ["x", "idx"], ["y"], axis=0, name="bad_gather"),
        ],
        "constant_index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor("base", TensorProto.INT64, [2], [0, 5]),
            helper.make_tensor("step", TensorProto.INT64, [2], [1, 2]),
        ],
    )
    return _save(graph, path)


def _input_index_model(path: Path) -> Path:
    """Gather whose indices are a graph input: generated indices are in range, a file's may not be."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")],
        "input_index",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return _save(graph, path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *args], capture_output=True, text=True, timeout=300
    )


def test_onnxruntime_refuses_the_constant_index_model(tmp_path: Path) -> None:
    path = _constant_index_model(tmp_path / "m.onnx")
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="out of data bounds"):
        session.run(None, {"x": np.zeros((5, 3), np.float32)})


@pytest.mark.parametrize("command", ["validate", "run"])
def test_error_says_a_constant_index_is_the_model_s_own(tmp_path: Path, command: str) -> None:
    path = _constant_index_model(tmp_path / "m.onnx")
    done = _cli(command, str(path), "-q")
    assert done.returncode == 2, done.stderr
    err = done.stderr
    assert f"file '{path}'" in err  # run names the file, as validate does
    assert "node 'bad_gather'" in err and "tensor idx" in err and "index 7" in err
    assert "idx is a constant of the model: it depends on no graph input" in err
    assert "Traceback" not in err


def test_input_indices_are_not_called_constant(tmp_path: Path) -> None:
    path = _input_index_model(tmp_path / "m.onnx")
    assert input_free_values(onnx.load(str(path)).graph) == frozenset()
    np.savez(tmp_path / "bad.npz", x=np.zeros((5, 3), np.float32), i=np.array([1, 9], np.int64))
    done = _cli("run", str(path), "--inputs", str(tmp_path / "bad.npz"), "-q")
    assert done.returncode == 2, done.stderr
    assert "index 9" in done.stderr and "constant of the model" not in done.stderr


def test_input_free_values_follow_constants_only() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["c"], value_ints=[1, 2], name="k"),
            helper.make_node("Add", ["c", "w"], ["cw"], name="a"),
            helper.make_node("Add", ["cw", "x"], ["cx"], name="b"),
            helper.make_node("RandomNormal", [], ["r"], shape=[2], dtype=TensorProto.FLOAT, name="rn"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("over", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("cx", TensorProto.INT64, [2])],
        [
            helper.make_tensor("w", TensorProto.INT64, [2], [3, 4]),
            helper.make_tensor("over", TensorProto.INT64, [2], [0, 0]),  # a feed may replace it
        ],
    )
    assert input_free_values(graph) == frozenset({"c", "cw", "w"})


def test_top_level_help_lists_every_directml_action() -> None:
    done = _cli("--help")
    assert done.returncode == 0
    # the directml entry of the command list, with argparse's wrapped continuation lines
    lines = done.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("directml"))
    line = " ".join([lines[start], *(ln for ln in lines[start + 1 :] if ln.startswith(" " * 10))][:3])
    sub = _cli("directml", "--help").stdout
    for action in ("setup", "sweep", "info"):
        assert action in sub  # the actions the subcommand has ...
        assert action in line  # ... are the ones the overview names


def test_running_a_lowered_file_says_how_to_run_it(tmp_path: Path) -> None:
    source = _input_index_model(tmp_path / "m.onnx")
    lowered = tmp_path / "m.lowered.onnx"
    assert _cli("lower", str(source), "-o", str(lowered), "-q").returncode == 0
    with pytest.raises(Exception, match=r"ai\.onnx\.contrib"):  # onnxruntime alone cannot load it either
        onnxruntime.InferenceSession(str(lowered), providers=["CPUExecutionProvider"])
    done = _cli("run", str(lowered), "-q")
    assert done.returncode == 2, done.stderr
    assert (
        "it looks like a model `dmlshim lower` wrote: run the source model with --engine customop"
        in done.stderr
    )
    assert "session_options_with_custom_ops()" in done.stderr
    # the way the message names runs it, with onnxruntime CPU's values on the source model
    from dmlshim.execute.engines.custom_op import session_options_with_custom_ops

    feeds = {"x": np.arange(15, dtype=np.float32).reshape(5, 3), "i": np.array([4, -1], np.int64)}
    ours = onnxruntime.InferenceSession(
        str(lowered), session_options_with_custom_ops(), providers=["CPUExecutionProvider"]
    )
    expected = onnxruntime.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feeds)[
        0
    ]
    np.testing.assert_array_equal(ours.run(None, feeds)[0], expected)


def test_an_unknown_operator_of_another_domain_gets_no_lowering_hint(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("MyOp", ["x"], ["y"], domain="com.example", name="custom")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "c.onnx"))
    done = _cli("run", str(tmp_path / "c.onnx"), "-q")
    assert done.returncode == 2
    assert "node 'custom'" in done.stderr and "com.example.MyOp" in done.stderr
    assert "dmlshim lower" not in done.stderr


def test_a_misspelt_option_shows_the_command_s_usage() -> None:
    done = _cli("validate", "onnx_models/topk_gather.onnx", "--feature-levl", "3_0")
    assert done.returncode == 2
    assert "usage: dmlshim validate" in done.stderr
    assert "dmlshim validate: error: unrecognized arguments: --feature-levl 3_0" in done.stderr
    assert "did you mean '--feature-level'?" in done.stderr


def test_every_shapeless_input_is_named_at_once(tmp_path: Path) -> None:
    """The shipped hw_noshape_inputs has two inputs with no shape: one error names both, and giving both
    shapes it names runs (onnxruntime CPU's values are the reference validate compares with)."""
    model = Path(__file__).resolve().parents[1] / "onnx_models" / "ecosystem" / "hw_noshape_inputs.onnx"
    done = _cli("validate", str(model), "-q")
    assert done.returncode == 2
    assert "graph inputs 'data', 'ids' are declared with an element type and no shape" in done.stderr
    assert "--input-shape data=D0,D1,.. --input-shape ids=D0,D1,.." in done.stderr
    ok = _cli("validate", str(model), "-q", "--input-shape", "data=4,3", "--input-shape", "ids=2")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("command", "seed"),
    [(("inspect",), True), (("run",), True), (("validate",), True), (("export",), True), (("lower",), False),
     (("directml", "sweep"), False)],
)  # fmt: skip
def test_every_command_spells_its_model_and_seed_alike(command: tuple[str, ...], seed: bool) -> None:
    usage = _cli(*command, "--help").stdout.split("\n\n")[0]
    assert "MODEL" in usage and re.search(r"\bmodels?\b", usage) is None  # not argparse's lowercase dest
    if seed:
        assert "[--seed N]" in usage


@pytest.mark.parametrize("command", ["inspect", "run", "validate", "export"])
def test_every_command_says_input_shape_is_ignored_with_inputs(command: str, tmp_path: Path) -> None:
    model = Path(__file__).resolve().parents[1] / "onnx_models" / "gather_beam_reorder_dynamic"
    extra = ["-o", str(tmp_path / "export")] if command == "export" else []
    done = _cli(
        command, f"{model}.onnx", "--inputs", f"{model}.npz", "--input-shape", "beams=3", "-q", *extra
    )
    assert done.returncode == 0, done.stderr
    assert f"dmlshim {command}: note: --input-shape is ignored with --inputs" in done.stderr
