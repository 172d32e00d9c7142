"""Hostile round 53: an initializer defined more than once under one name (merged graphs produce them;
onnxruntime loads them with a warning). Which definition onnxruntime reads depends on the tensors
(``dmlshim.model.duplicate_initializers``); every case here is asked of onnxruntime (CPU, one thread).

Before: from 128 bytes up to 64 KiB the emulated Gather read the last definition where onnxruntime reads an
earlier one (silently other rows); from 64 KiB the model was refused ("Duplicate definition-site", said to
be onnxruntime's refusal) although onnxruntime loads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.cli.main import main

ENGINES = [None, "customop", "cpu"]
FEED = {"i": np.array([0, -1], np.int64)}


def _external(values: np.ndarray, folder: Path, file: str) -> TensorProto:
    values.tofile(folder / file)
    tensor = numpy_helper.from_array(values, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", file
    return tensor


def _model(tensors: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["y"], axis=0),
            helper.make_node("Relu", ["w"], ["r"]),
            helper.make_node("Gather", ["r", "i"], ["z"], axis=0),
        ],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        initializer=tensors,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _check(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())  # (onnx.save would write the external tensors' data)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    want = ref.run(None, FEED)
    for source in (str(path), path.read_bytes()):
        if isinstance(source, bytes) and any(
            t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer
        ):
            continue  # external data of a model given as bytes is looked for in the working directory
        for engine in ENGINES:
            kwargs = {} if engine is None else {"engine": engine}
            sess = dmlshim.InferenceSession(source, **kwargs)
            got = sess.run(None, FEED)
            for a, b in zip(want, got, strict=True):
                assert np.array_equal(a, b), (engine, type(source).__name__, a, b)
            assert [x.name for x in sess.get_overridable_initializers()] == [
                x.name for x in ref.get_overridable_initializers()
            ]


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("rows", [1, 31, 32, 1024, 20000], ids=["4B", "124B", "128B", "4KiB", "80KB"])
def test_inline_duplicates(tmp_path: Path, count: int, rows: int) -> None:
    base = np.arange(rows, dtype=np.float32) + 1
    _check(_model([numpy_helper.from_array(base * (k + 1), "w") for k in range(count)]), tmp_path / "m.onnx")


@pytest.mark.parametrize("rows", [16, 1000])
@pytest.mark.parametrize("pattern", ["ext-ext", "inline-ext", "ext-inline", "typed-raw"])
def test_external_and_typed_duplicates(tmp_path: Path, rows: int, pattern: str) -> None:
    base = np.arange(rows, dtype=np.float32) + 1
    make = {
        "ext": lambda k: _external(base * k, tmp_path, f"w{k}.bin"),
        "inline": lambda k: numpy_helper.from_array(base * k, "w"),
        "typed": lambda k: helper.make_tensor("w", TensorProto.FLOAT, [rows], (base * k).tolist()),
        "raw": lambda k: numpy_helper.from_array(base * k, "w"),
    }
    kinds = pattern.split("-")
    _check(_model([make[kind](k + 1) for k, kind in enumerate(kinds)]), tmp_path / "m.onnx")


def test_duplicates_in_an_if_branch_are_refused_as_onnxruntime_refuses_them(tmp_path: Path) -> None:
    base = np.arange(64, dtype=np.float32) + 1
    branch = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["t"], axis=0)],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(base, "w"), numpy_helper.from_array(base * 2, "w")],
    )
    other = helper.make_graph(
        [helper.make_node("Gather", ["v", "i"], ["e"], axis=0)],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(-base, "v")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(Exception, match="not unique") as theirs:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for engine in ENGINES:
        with pytest.raises(type(theirs.value), match="not unique"):  # refused as onnxruntime refuses it
            dmlshim.InferenceSession(str(path), **({} if engine is None else {"engine": engine}))


def test_cli_validate_and_run_read_onnxruntimes_definition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = np.arange(20000, dtype=np.float32) + 1
    path = tmp_path / "m.onnx"
    path.write_bytes(
        _model(
            [numpy_helper.from_array(base, "w"), numpy_helper.from_array(base * 2, "w")]
        ).SerializeToString()
    )
    np.savez(tmp_path / "in.npz", **FEED)
    assert main(["validate", str(path), "-q", "--inputs", str(tmp_path / "in.npz")]) == 0
    assert "MATCH" in capsys.readouterr().out
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "-q", "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]) == 0
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, FEED)
    with np.load(out) as got:
        assert np.array_equal(got["y"], want[0]) and np.array_equal(got["z"], want[1])


PATTERNS = {
    "sparse1+const2": ([2], [], [1]),
    "init1+sparse2+const3": ([3], [1], [2]),
    "init1+init2+const3": ([3], [1, 2], []),
    "const1+const2+const3": ([1, 2, 3], [], []),
    "init1+const2+const3": ([2, 3], [1], []),
    "init1+sparse2": ([], [1], [2]),
    "init1+value_floats4": (["floats4"], [1], []),
    "sparse1+sparse2 (refused)": ([], [], [1, 2]),
}


@pytest.mark.parametrize("rows", [4, 64, 20000])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_constant_nodes_and_sparse_initializers_sharing_an_initializers_name(
    tmp_path: Path, rows: int, pattern: str
) -> None:
    """onnxruntime makes initializers of Constant nodes and sparse initializers; the same rule picks among
    them (registered: initializers, Constant nodes, sparse initializers). Before: the default engine's
    Gather read the Constant's or the sparse tensor's value where onnxruntime read another, and from 64 KiB
    the customop and cpu engines refused the model."""
    base = np.arange(rows, dtype=np.float32) + 1
    consts, inits, sparses = PATTERNS[pattern]
    nodes = [
        helper.make_node("Constant", [], ["w"], value_floats=(base * 4).tolist())
        if k == "floats4"
        else helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(base * k, f"c{k}"))
        for k in consts
    ]
    sparse = [
        helper.make_sparse_tensor(
            numpy_helper.from_array(np.array([k], np.float32), "w"),
            numpy_helper.from_array(np.array([0], np.int64), ""),
            [rows],
        )
        for k in sparses
    ]
    graph = helper.make_graph(
        [*nodes, helper.make_node("Gather", ["w", "i"], ["y"], axis=0)],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(base * k, "w") for k in inits],
        sparse_initializer=sparse,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    try:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, FEED)
    except Exception as exc:  # whatever onnxruntime raises, dmlshim raises that class
        for engine in ENGINES:
            with pytest.raises(type(exc)):
                dmlshim.InferenceSession(str(path), **({} if engine is None else {"engine": engine}))
        return
    assert "refused" not in pattern
    for source in (str(path), path.read_bytes()):
        for engine in ENGINES:
            got = dmlshim.InferenceSession(source, **({} if engine is None else {"engine": engine})).run(
                None, FEED
            )
            assert np.array_equal(want[0], got[0]), (engine, want[0], got[0])


@pytest.mark.parametrize("second", ["shape", "dtype"])
def test_duplicates_of_another_shape_or_type_are_refused_as_onnxruntime_refuses_them(
    tmp_path: Path, second: str
) -> None:
    base = np.arange(64, dtype=np.float32) + 1
    other = base[:32] if second == "shape" else base.astype(np.float64)
    path = tmp_path / "m.onnx"
    model = _model([numpy_helper.from_array(base, "w"), numpy_helper.from_array(other, "w")])
    path.write_bytes(model.SerializeToString())
    with pytest.raises(Exception) as theirs:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, FEED)
    for engine in ENGINES:
        with pytest.raises(type(theirs.value)):
            dmlshim.InferenceSession(str(path), **({} if engine is None else {"engine": engine})).run(
                None, FEED
            )


@pytest.mark.parametrize("rows", [4, 64, 20000])
@pytest.mark.parametrize("added", ["w", "v"])
def test_added_initializer_with_a_duplicated_name_beside_it(tmp_path: Path, rows: int, added: str) -> None:
    base = np.arange(rows, dtype=np.float32) + 1
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["y"], axis=0),
            helper.make_node("Gather", ["v", "i"], ["z"], axis=0),
        ],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        initializer=[numpy_helper.from_array(base * k, n) for k, n in ((1, "w"), (2, "w"), (3, "v"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    value = ort.OrtValue.ortvalue_from_numpy(-base)

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.add_initializer(added, value)
        return so

    want = ort.InferenceSession(str(path), options(), providers=["CPUExecutionProvider"]).run(None, FEED)
    for engine in ENGINES:
        got = dmlshim.InferenceSession(
            str(path), options(), **({} if engine is None else {"engine": engine})
        ).run(None, FEED)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), engine


def test_a_callers_model_proto_with_duplicates_is_not_modified() -> None:
    base = np.arange(1024, dtype=np.float32) + 1
    model = _model([numpy_helper.from_array(base, "w"), numpy_helper.from_array(base * 2, "w")])
    model.graph.node.insert(
        0, helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(base * 3, "c"))
    )
    before = model.SerializeToString()
    want = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, FEED)
    for engine in ENGINES:
        got = dmlshim.InferenceSession(model, **({} if engine is None else {"engine": engine})).run(
            None, FEED
        )
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), engine
        assert model.SerializeToString() == before, engine
