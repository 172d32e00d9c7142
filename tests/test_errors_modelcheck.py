"""One model check for every command (issue 12): what inspect and validate refuse, run, lower, export and
InferenceSession refuse too, each with exit 2 and one sentence; external data is checked in full before a
byte of it is read; MemoryError, RecursionError and protobuf errors never leave as tracebacks."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.errors import BadModelError, DmlShimError, OutOfMemoryError, TooLargeError
from dmlshim.model.modelcheck import check_model
from tests.fuzz_settings import assert_cli_error, run_cli
from tests.oracle import IR_VERSION
from tests.safety_helpers import run_child

LIMIT = 100_000_000
FEEDS = {"data": np.arange(12, dtype=np.float32).reshape(3, 4), "idx": np.array([0, 1], np.int64)}


def _model(nodes=None, inits=(), ir: int = IR_VERSION, opset: int = 13) -> onnx.ModelProto:
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = nodes or [helper.make_node("Gather", ["data", "idx"], ["y"], name="g", axis=0)]
    graph = helper.make_graph(nodes, "g", [data, idx], [y], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def _gather(name: str = "g", out: str = "y", **attrs: object) -> onnx.NodeProto:
    return helper.make_node("Gather", ["data", "idx"], [out], name=name, **({"axis": 0} | attrs))


def _dup_attr() -> onnx.ModelProto:
    node = _gather()
    node.attribute.add().CopyFrom(node.attribute[0])
    return _model([node])


# Each case: the model, and words the one-sentence message must hold (the ONNX rule broken, the value).
INVALID = {
    "two nodes write y": (lambda: _model([_gather(), _gather("g2")]), ["single static assignment", "'y'"]),
    "initializer [2,3] for [3,4]": (
        lambda: _model(inits=[numpy_helper.from_array(np.zeros((2, 3), np.float32), "data")]),
        ["[2, 3]", "[3, 4]"],
    ),
    "ir_version 99": (lambda: _model(ir=99), ["ir_version 99"]),
    "opset 99": (lambda: _model(opset=99), ["version 99"]),
    "unknown attribute": (lambda: _model([_gather(foo=3)]), ["foo"]),
    "duplicate attribute": (_dup_attr, ["'axis'", "multiple"]),
    "int32 initializer for int64 input": (
        lambda: _model(inits=[numpy_helper.from_array(np.array([0, 1], np.int32), "idx")]),
        ["tensor(int32)", "tensor(int64)"],
    ),
    "duplicate node names": (
        lambda: _model([_gather(out="t"), helper.make_node("Identity", ["t"], ["y"], name="g")]),
        ["two nodes are named 'g'"],
    ),
}


@pytest.fixture
def feeds(tmp_path: Path) -> Path:
    path = tmp_path / "in.npz"
    np.savez(path, **FEEDS)
    return path


@pytest.mark.parametrize("command", ["inspect", "validate", "run", "lower", "export"])
@pytest.mark.parametrize("case", list(INVALID))
def test_every_command_refuses_what_the_model_check_refuses(
    tmp_path: Path, feeds: Path, case: str, command: str
) -> None:
    build, needles = INVALID[case]
    model = tmp_path / "m.onnx"
    model.write_bytes(build().SerializeToString())
    extra = {
        "inspect": [],
        "validate": ["--inputs", feeds],
        "run": ["--inputs", feeds],
        "lower": ["-o", tmp_path / "out.onnx"],
        "export": ["-o", tmp_path / "export", "--inputs", feeds],
    }[command]
    r = run_cli(command, model, *extra)
    assert_cli_error(r.code, r.err, str(model), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "m.onnx"]  # nothing written


@pytest.mark.parametrize("case", list(INVALID))
def test_inference_session_raises_dmlshim_errors(case: str) -> None:
    build, needles = INVALID[case]
    with pytest.raises(BadModelError) as info:
        InferenceSession(build())
    for needle in needles:
        assert needle in str(info.value)


def test_a_valid_model_passes_and_runs(feeds: Path, tmp_path: Path) -> None:
    check_model(_model())
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    r = run_cli("run", model, "--inputs", feeds, "-o", tmp_path / "out.npz")
    assert r.code == 0, r.err
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], FEEDS["data"][[0, 1]])


# --- external data ----------------------------------------------------------------------------------


def _external(
    folder: Path,
    *,
    offset: str | None = "0",
    length: str | None = None,
    location: str = "w.bin",
    dims: tuple[int, ...] = (4, 3),
    file_bytes: int | None = None,
) -> Path:
    """A Gather over initializer ``w`` whose bytes live in ``folder/location`` (entries written verbatim)."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, value
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "idx"], ["y"], name="g")], "g", [idx], [y], [w]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    if "\x00" not in location and not os.path.isabs(location) and ".." not in location:
        with open(folder / location, "wb") as handle:
            if file_bytes is None:
                handle.write(np.arange(12, dtype=np.float32).tobytes())
            else:
                handle.truncate(file_bytes)  # sparse: costs no disk and no memory
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_model_runs(tmp_path: Path) -> None:
    path = _external(tmp_path)
    session = InferenceSession(str(path))
    out = session.run(None, {"idx": np.array([2, 0], np.int64)})[0]
    np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(4, 3)[[2, 0]])


@pytest.mark.parametrize(
    ("entries", "needles"),
    [
        ({"offset": "-5"}, ["offset '-5'", "non-negative integer"]),
        ({"offset": "abc"}, ["offset 'abc'", "non-negative integer"]),
        ({"length": "7"}, ["length 7", "48 bytes"]),
        ({"offset": "40"}, ["offset 40", "beyond"]),
        # read up to the NUL, as onnxruntime reads it: the file 'w' is missing (tests/test_parity54.py)
        ({"location": "w\x00.bin"}, ["external data 'w'", "No such file"]),
    ],
)
@pytest.mark.parametrize("command", ["inspect", "validate", "run"])
def test_bad_external_entries_exit_2(
    tmp_path: Path, entries: dict[str, str], needles: list[str], command: str
) -> None:
    path = _external(tmp_path, **entries)  # type: ignore[arg-type]
    extra = ["--inputs", tmp_path / "in.npz"] if command != "inspect" else []
    np.savez(tmp_path / "in.npz", idx=np.array([0, 1], np.int64))
    r = run_cli(command, path, *extra)
    assert_cli_error(r.code, r.err, "'w'", *needles)


def test_external_data_fifo_is_not_read(tmp_path: Path) -> None:
    path = _external(tmp_path, location="pipe.bin", file_bytes=0)
    (tmp_path / "pipe.bin").unlink()
    os.mkfifo(tmp_path / "pipe.bin")
    r = run_cli("inspect", path)
    assert_cli_error(r.code, r.err, "not a regular file")


def test_in_memory_model_without_its_external_data(tmp_path: Path) -> None:
    path = _external(tmp_path)
    with pytest.raises(BadModelError, match="given in memory"):
        InferenceSession(onnx.load(str(path), load_external_data=False))


@pytest.mark.parametrize("gib", [1, 2.5, 6])
@pytest.mark.parametrize("command", ["inspect", "run", "validate", "lower"])
def test_external_data_bomb_never_read(tmp_path: Path, gib: float, command: str) -> None:
    """A 100 MB memory limit and a model declaring 1-6 GiB of external data (a sparse file). The commands
    that read a model without its weights never read the data and run within the limit (the emulated
    Gather maps its table from the file); so does lower, which copies every weight to its output a chunk
    at a time (the sparse file's holes stay holes)."""
    count = int(gib * (1 << 30)) // 4
    path = _external(tmp_path, dims=(count, 1), file_bytes=count * 4)
    np.savez(tmp_path / "in.npz", idx=np.array([0, 1], np.int64))
    extra = ["--inputs", str(tmp_path / "in.npz")] if command in ("run", "validate") else []
    if command == "lower":
        extra = ["-o", str(tmp_path / "lowered.onnx")]
    child = run_child([command, str(path), *extra], env={"DMLSHIM_MEMORY_LIMIT": str(LIMIT)})
    assert child.returncode == 0, child.stderr
    assert 0 < child.peak_rss < LIMIT + 300_000_000, child.peak_rss
    if command == "lower":
        data = (tmp_path / "lowered.onnx.data").stat()
        assert data.st_size == count * 4 and data.st_blocks * 512 < 64 << 20, data


def test_external_data_inside_a_subgraph_is_checked_and_runs(tmp_path: Path) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    table = np.arange(12, dtype=np.float32).reshape(4, 3)

    def branch(name: str, values: np.ndarray) -> onnx.GraphProto:
        out = helper.make_tensor_value_info("o", TensorProto.FLOAT, [2, 3])
        node = helper.make_node("Gather", ["w", "idx"], ["o"], name=f"g_{name}")
        return helper.make_graph([node], name, [], [out], [numpy_helper.from_array(values, "w")])

    node = helper.make_node(
        "If", ["c"], ["y"], name="if", then_branch=branch("then", table), else_branch=branch("else", -table)
    )
    inputs = [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
    ]
    graph = helper.make_graph(
        [node], "top", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    onnx.save(model, tmp_path / "m.onnx")
    assert (tmp_path / "w.bin").stat().st_size == 2 * table.nbytes
    session = InferenceSession(str(tmp_path / "m.onnx"))
    for cond, expected in ((True, table[[1, 2]]), (False, -table[[1, 2]])):
        out = session.run(None, {"c": np.array(cond), "idx": np.array([1, 2], np.int64)})[0]
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("gib", [2.5, 6])
def test_external_data_above_protobuf_limit_refused_without_memory_limit(
    tmp_path: Path, gib: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under the memory limit (1 TB here) but above what one protobuf message holds: an EncodeError
    # traceback at 2.5 GiB and a crash at 6 GiB before; now refused before a byte is read.
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(1 << 40))
    count = int(gib * (1 << 30)) // 4
    path = _external(tmp_path, dims=(count, 1), file_bytes=count * 4)
    with open(tmp_path / "w.bin", "r+b") as data:  # two known rows in the sparse table
        data.seek(2 * 4)
        data.write(np.float32(1.5).tobytes())
        data.seek((count - 1) * 4)
        data.write(np.float32(-3.0).tobytes())
    # lower copies the table to its own external data (it was refused: the whole model above 2 GiB)
    r = run_cli("lower", path, "-o", str(tmp_path / "lowered.onnx"))
    assert r.code == 0, r.err
    lowered = np.memmap(tmp_path / "lowered.onnx.data", np.float32, mode="r")
    assert lowered.shape == (count,) and lowered[2] == 1.5 and lowered[count - 1] == -3.0
    del lowered
    assert run_cli("inspect", path).code == 0  # inspect reads shapes only
    # The custom-op engine lowers the model without its weights: its onnxruntime session reads the table
    # from the file (not run here: the table would cross the custom-op bridge, a copy of gib GiB).
    custom = InferenceSession(str(path), engine="customop")
    [table] = [t for t in custom.engine.lowered.model.graph.initializer if t.name == "w"]  # type: ignore[attr-defined]
    assert table.data_location == TensorProto.EXTERNAL and not table.HasField("raw_data")
    # The default engine reads the model without its weights (issue 22: models larger than
    # memory allows twice): the emulated Gather maps the table from the file (sparse here: zeros
    # but the two rows written); so does the cpu engine (onnxruntime's session reads the file), with
    # onnxruntime's default options or the caller's.
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    for providers in (None, ["CPUExecutionProvider"]):
        for so in (None, options):
            session = InferenceSession(str(path), so, providers=providers)
            out = session.run(None, {"idx": np.array([2, count - 1], np.int64)})[0]
            np.testing.assert_array_equal(out, np.array([[1.5], [-3.0]], np.float32))


# --- no tracebacks ----------------------------------------------------------------------------------


def _nested_if(depth: int) -> bytes:
    """If inside If ``depth`` deep, written as protobuf wire bytes (onnx's Python API refuses to build it)."""

    def varint(n: int) -> bytes:
        out = b""
        while True:
            low, n = n & 0x7F, n >> 7
            if not n:
                return out + bytes([low])
            out += bytes([low | 0x80])

    def field(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    def number(n: int, value: int) -> bytes:
        return varint(n << 3) + varint(value)

    out = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1]).SerializeToString()
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, []).SerializeToString()
    const = helper.make_node("Constant", [], ["o"], value=numpy_helper.from_array(np.ones(1, np.float32)))
    leaf = helper.make_graph(
        [const], "leaf", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])]
    )
    leaf_bytes = leaf.SerializeToString()

    def if_node(then: bytes, i: int) -> bytes:
        branch = field(1, b"then_branch") + field(6, then) + number(20, 5)
        other = field(1, b"else_branch") + field(6, leaf_bytes) + number(20, 5)
        return (
            field(1, b"c")
            + field(2, b"o")
            + field(3, f"if{i}".encode())
            + field(4, b"If")
            + field(5, branch)
            + field(5, other)
        )

    body = leaf_bytes
    for i in range(depth - 1):
        body = field(1, if_node(body, i)) + field(2, f"b{i}".encode()) + field(12, out)
    top = field(1, if_node(body, depth - 1)) + field(2, b"top") + field(11, cond) + field(12, out)
    return number(1, IR_VERSION) + field(8, field(1, b"") + number(2, 13)) + field(7, top)


@pytest.mark.parametrize("command", ["inspect", "validate", "run", "lower", "export"])
def test_if_nested_32_deep(tmp_path: Path, command: str) -> None:
    path = tmp_path / "if32.onnx"
    path.write_bytes(_nested_if(32))
    extra = {"lower": ["-o", tmp_path / "o.onnx"], "export": ["-o", tmp_path / "e"]}.get(command, [])
    r = run_cli(command, path, *extra)
    assert_cli_error(r.code, r.err, str(path), "MaxDepth")


def test_decode_error_after_shape_inference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from google.protobuf.message import DecodeError

    def deep(*args: object, **kwargs: object) -> None:
        raise DecodeError(
            "Error parsing message with type 'onnx.ModelProto': Exceeded upb_DecodeOptions_MaxDepth"
        )

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", deep)
    # onnxruntime loads the model, so onnx's failure is only a warning that says what happened
    with caplog.at_level(logging.WARNING, logger="dmlshim.model.modelcheck"):
        check_model(_model())
    assert "nested deeper than protobuf allows" in caplog.text


@pytest.mark.parametrize("exc", [MemoryError(), MemoryError("Unable to allocate 4.00 GiB for an array")])
def test_memory_error_says_what_ran_out(
    tmp_path: Path, feeds: Path, monkeypatch: pytest.MonkeyPatch, exc: MemoryError
) -> None:
    from dmlshim.ort import session

    def exhausted(self: object) -> None:
        raise exc

    monkeypatch.setattr(session.InferenceSession, "_build_engine", exhausted)
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    r = run_cli("run", model, "--inputs", feeds)
    assert_cli_error(
        r.code, r.err, "ran out of memory", str(exc) or "an allocation failed", "DMLSHIM_MEMORY_LIMIT"
    )
    with pytest.raises(OutOfMemoryError, match="ran out of memory while loading the model") as info:
        InferenceSession(str(model))
    assert isinstance(info.value, TooLargeError) and isinstance(info.value, DmlShimError)
