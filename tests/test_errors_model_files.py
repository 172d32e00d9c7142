"""Bad model files: not ONNX, truncated, empty, failing onnx.checker, unknown op domains, float indices,
external data outside the model's folder. Every case ends in a typed error naming the file (and node, op,
tensor, rule where they apply) and exit code 2 from the CLI, never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import BadModelError, InferenceSession
from dmlshim.translate import load_model as translate_load_model
from tests.fuzz_settings import assert_cli_error, one_node_model, run_cli
from tests.oracle import IR_VERSION

REPO = Path(__file__).resolve().parents[1]
EMBEDDING = REPO / "onnx_models" / "embedding_gather.onnx"
COMMANDS = ("inspect", "run", "validate")


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, Path]:
    payload = EMBEDDING.read_bytes()
    files = {
        "text": tmp_path / "text.onnx",
        "truncated": tmp_path / "truncated.onnx",
        "empty": tmp_path / "empty.onnx",
        "random": tmp_path / "random.onnx",
    }
    files["text"].write_text("this is a text file, not a protobuf\n")
    files["truncated"].write_bytes(payload[: len(payload) // 2])
    files["empty"].write_bytes(b"")
    files["random"].write_bytes(np.random.default_rng(7).bytes(4096))
    return files


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["text", "truncated", "empty", "random"])
def test_unreadable_model_file_cli(bad_files: dict[str, Path], kind: str, command: str) -> None:
    path = bad_files[kind]
    r = run_cli(command, path)
    assert_cli_error(r.code, r.err, str(path), "not")
    assert "ONNX" in r.err


@pytest.mark.parametrize("kind", ["text", "truncated", "empty", "random"])
def test_unreadable_model_file_api(bad_files: dict[str, Path], kind: str) -> None:
    with pytest.raises(BadModelError) as info:
        InferenceSession(bad_files[kind])
    assert info.value.path == str(bad_files[kind])
    with pytest.raises(BadModelError):
        InferenceSession(bad_files[kind].read_bytes())
    with pytest.raises(BadModelError) as info:
        translate_load_model(bad_files[kind])
    assert info.value.path == str(bad_files[kind])


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_model_and_directory(tmp_path: Path, command: str) -> None:
    r = run_cli(command, tmp_path / "nope.onnx")
    assert_cli_error(r.code, r.err, "nope.onnx")
    r = run_cli(command, tmp_path)
    assert_cli_error(r.code, r.err, str(tmp_path))


def _checker_failing_model() -> onnx.ModelProto:
    # The node reads 'ghost', which nothing defines: onnx.checker rejects the graph.
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "ghost"], ["y"], name="g_ghost")],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_model_failing_checker(tmp_path: Path) -> None:
    model = _checker_failing_model()
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    path = tmp_path / "checker.onnx"
    onnx.save(model, path)
    r = run_cli("inspect", path)
    assert_cli_error(r.code, r.err, str(path), "onnx.checker", "ghost")
    r = run_cli("run", path)
    assert_cli_error(r.code, r.err, str(path), "ghost")
    with pytest.raises(BadModelError) as info:
        InferenceSession(path)
    assert info.value.path == str(path)


def _custom_domain_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Frobnicate", ["x"], ["t"], name="frob", domain="com.acme"),
            helper.make_node("Gather", ["t", "i"], ["y"], name="gather", axis=0),
        ],
        "custom",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.acme", 1)],
        ir_version=IR_VERSION,
    )


def test_unknown_domain_inspect_names_node(tmp_path: Path) -> None:
    path = tmp_path / "custom.onnx"
    onnx.save(_custom_domain_model(), path)
    # onnxruntime refuses the model (run and validate: below); inspect, a static report, names the node
    r = run_cli("inspect", path)
    assert r.code == 1 and "Traceback" not in r.err  # the Gather reads the custom op's output: unknown shape
    assert "'frob'" in r.err and "com.acme.Frobnicate" in r.err  # the warning
    listed = r.out.split("Nodes inspect cannot place")[1].splitlines()
    assert listed[2].split() == ["frob", "Frobnicate", "com.acme"]
    r = run_cli("inspect", path, "--json")
    assert r.code == 1 and "Traceback" not in r.err
    assert '"unknown_operators": [{"node": "frob", "op_type": "Frobnicate", "domain": "com.acme"}]' in r.out


def test_unknown_domain_run_and_session(tmp_path: Path) -> None:
    path = tmp_path / "custom.onnx"
    onnx.save(_custom_domain_model(), path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((3, 4), np.float32), i=np.array([0, 1]))
    for command in ("run", "validate"):
        r = run_cli(command, path, "--inputs", inputs)
        assert_cli_error(r.code, r.err, "'frob'", "com.acme", "Frobnicate")
    with pytest.raises(BadModelError) as info:
        InferenceSession(path)
    err = info.value
    assert err.node == "frob"
    assert err.op_type == "com.acme.Frobnicate"
    assert err.value == "com.acme"
    assert err.path == str(path)


def _float_indices_model() -> onnx.ModelProto:
    # As the seed's ScatterND example: indices declared as float.
    return one_node_model(
        "ScatterND",
        {
            "data": np.zeros(8, np.float32),
            "indices": np.zeros((4, 1), np.float32),
            "updates": np.zeros(4, np.float32),
        },
        name="snd_float",
    )


def test_float_indices_onnx_model(tmp_path: Path) -> None:
    path = tmp_path / "float_indices.onnx"
    onnx.save(_float_indices_model(), path)
    r = run_cli("inspect", path)  # onnxruntime refuses the model, so every command does
    assert_cli_error(r.code, r.err, "'snd_float'", "ScatterND", "tensor(float)", "tensor(int64)")
    inputs = tmp_path / "in.npz"
    np.savez(
        inputs,
        data=np.zeros(8, np.float32),
        indices=np.array([[4.0], [3.0], [1.0], [7.0]], np.float32),
        updates=np.ones(4, np.float32),
    )
    r = run_cli("run", path, "--inputs", inputs)
    assert_cli_error(r.code, r.err, "'snd_float'", "ScatterND", "tensor(float)", "tensor(int64)")
    r = run_cli("validate", path)
    assert_cli_error(r.code, r.err, "indices")
    with pytest.raises(BadModelError) as info:
        InferenceSession(path)
    assert info.value.node == "snd_float"
    assert info.value.tensor == "indices"
    assert info.value.value == "tensor(float)"


@pytest.mark.parametrize("op_type", ["Gather", "GatherElements", "GatherND"])
def test_float_indices_each_gather(op_type: str) -> None:
    model = one_node_model(
        op_type, {"data": np.zeros((3, 3), np.float32), "indices": np.zeros((3, 1), np.float32)}, name="n"
    )
    with pytest.raises(BadModelError) as info:
        InferenceSession(model)
    assert info.value.node == "n" and info.value.op_type == op_type


def _external_model(folder: Path) -> Path:
    weights = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(1024, 4), "weights")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["weights", "i"], ["y"], name="lookup", axis=0)],
        "ext",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    return path


def _relocate(path: Path, location: str, name: str) -> Path:
    proto = onnx.load(path, load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    out = path.with_name(name)
    onnx.save(proto, out)
    return out


@pytest.fixture
def escaping_models(tmp_path: Path) -> dict[str, Path]:
    good = _external_model(tmp_path / "models")
    shutil.copy(good.with_name("w.bin"), tmp_path / "x.bin")
    os.symlink(tmp_path / "x.bin", good.with_name("link.bin"))
    return {
        "good": good,
        "parent": _relocate(good, "../x.bin", "parent.onnx"),
        "absolute": _relocate(good, str(tmp_path / "x.bin"), "absolute.onnx"),
        "symlink": _relocate(good, "link.bin", "symlink.onnx"),
        "nested_escape": _relocate(good, "sub/../../x.bin", "nested.onnx"),
    }


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink", "nested_escape"])
def test_external_data_outside_folder_refused(
    escaping_models: dict[str, Path], kind: str, command: str, tmp_path: Path
) -> None:
    path = escaping_models[kind]
    inputs = tmp_path / "i.npz"
    np.savez(inputs, i=np.array([0, 3]))
    extra = ["--inputs", inputs] if command != "inspect" else []
    r = run_cli(command, path, *extra)
    assert_cli_error(r.code, r.err, str(path), "weights", "outside the model's folder")
    with pytest.raises(BadModelError) as info:
        InferenceSession(path)
    assert info.value.tensor == "weights"
    assert info.value.rule == "external data must lie in the model's folder"


def test_external_data_inside_folder_works(escaping_models: dict[str, Path], tmp_path: Path) -> None:
    good = escaping_models["good"]
    out = InferenceSession(good).run(None, {"i": np.array([0, 1023])})[0]
    np.testing.assert_array_equal(out, np.arange(4096, dtype=np.float32).reshape(1024, 4)[[0, 1023]])
    assert run_cli("inspect", good).code == 0


def test_external_data_missing_file(escaping_models: dict[str, Path]) -> None:
    missing = _relocate(escaping_models["good"], "absent.bin", "missing.onnx")
    for command in ("inspect", "run"):
        r = run_cli(command, missing)
        assert_cli_error(r.code, r.err, str(missing), "external data")


# Defects the byte-mutation fuzzer found, each once as a hand-made model: protobuf parses them, and they
# used to break deep inside onnx, numpy or the engine instead of being reported.


def _gather_model() -> onnx.ModelProto:
    return one_node_model(
        "Gather",
        {"data": np.zeros((3, 4), np.float32), "indices": np.array([0, 2])},
        {"axis": 0},
        name="AAAA",
    )


def _damaged(kind: str) -> bytes:
    model = _gather_model()
    if kind == "non-utf8-name":
        return model.SerializeToString().replace(b"AAAA", b"\xff\xfeAA")
    if kind == "tensor-data-short":
        model.graph.initializer.append(helper.make_tensor("table", TensorProto.INT64, [3], [1, 2, 3]))
        del model.graph.initializer[0].int64_data[1:]
    elif kind == "untyped-attribute":
        model.graph.node[0].attribute[0].type = onnx.AttributeProto.UNDEFINED
    elif kind == "undefined-output":
        model.graph.output.add().name = "nowhere"
    elif kind == "missing-input":
        del model.graph.node[0].input[1:]
    elif kind == "undefined-elem-type":
        model.graph.input[1].type.tensor_type.elem_type = 0
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("non-utf8-name", "UTF-8"),
        ("tensor-data-short", "'table'"),
        ("untyped-attribute", "'axis'"),
        ("undefined-output", "nowhere"),
        ("missing-input", "1 inputs"),
        ("undefined-elem-type", "'indices'"),
    ],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_damaged_models_reported(tmp_path: Path, kind: str, needle: str, command: str) -> None:
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(_damaged(kind))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, data=np.zeros((3, 4), np.float32), indices=np.array([0, 2]))
    r = run_cli(command, path, *(["--inputs", inputs] if command == "run" else []))
    # onnxruntime refuses every one of these models, so every command does, naming the file.
    assert_cli_error(r.code, r.err, needle, str(path))
    with pytest.raises(BadModelError):
        InferenceSession(path)
