"""Programs that bind dmlshim in place of onnxruntime: what they pass (names, feeds, models) and what they
catch, compared with onnxruntime's CPU session on the same model in the same test (every expectation is
onnxruntime's own answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

import dmlshim
from tests.oracle import binding_with_inputs

_TABLE = np.arange(40, dtype=np.float32).reshape(10, 4) / 8


def _decoder_step(opset: int = 13) -> onnx.ModelProto:
    """An embedding Gather, a cache Concat and a GatherElements over the logits: a decoder step's shape."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0, name="embed"),
        helper.make_node("Concat", ["past", "emb"], ["present"], axis=1, name="cat"),
        helper.make_node("ReduceSum", ["present"], ["logits"], axes=[2], keepdims=1, name="sum")
        if opset < 13
        else helper.make_node("ReduceSum", ["present", "axes"], ["logits"], keepdims=1, name="sum"),
        helper.make_node("GatherElements", ["logits", "pick"], ["best"], axis=1, name="pick_best"),
    ]
    inits = [
        numpy_helper.from_array(_TABLE, "table"),
        numpy_helper.from_array(np.array([2], np.int64), "axes"),
    ]
    graph = helper.make_graph(
        nodes,
        "decoder_step",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past_seq", 4]),
            helper.make_tensor_value_info("pick", TensorProto.INT64, ["batch", 1, 1]),
        ],
        [
            helper.make_tensor_value_info("present", TensorProto.FLOAT, ["batch", "total", 4]),
            helper.make_tensor_value_info("best", TensorProto.FLOAT, ["batch", 1, 1]),
        ],
        inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def _options() -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _sessions(model: onnx.ModelProto) -> tuple[Any, Any]:
    data = model.SerializeToString()
    theirs = onnxruntime.InferenceSession(data, _options(), providers=["CPUExecutionProvider"])
    return theirs, dmlshim.InferenceSession(data, _options())


def _feeds() -> dict[str, np.ndarray]:
    return {
        "ids": np.array([[1, -2, 9], [0, 4, 4]], np.int64),
        "past": np.arange(2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4),
        "pick": np.array([[[4]], [[-1]]], np.int64),
    }


def _raised(call: Any) -> BaseException:
    with pytest.raises(BaseException) as info:  # the class is compared with onnxruntime's
        call()
    return info.value


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_bytes_output_names_are_taken_as_onnxruntime_takes_them(opset: int) -> None:
    theirs, ours = _sessions(_decoder_step(opset))
    feeds = _feeds()
    expected = theirs.run([b"best", "present"], feeds)
    got = ours.run([b"best", "present"], feeds)
    assert [g.shape for g in got] == [e.shape for e in expected] == [(2, 1, 1), (2, 5, 4)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    values = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    expected_ov = theirs.run_with_ort_values([b"best"], values)
    got_ov = ours.run_with_ort_values([b"best"], values)
    np.testing.assert_array_equal(got_ov[0].numpy(), expected_ov[0].numpy())
    # an io_binding with bytes names, input and output
    answers = []
    for session in (theirs, ours):
        binding = session.io_binding()
        binding.bind_cpu_input(b"ids", feeds["ids"])
        binding.bind_cpu_input("past", feeds["past"])
        binding.bind_cpu_input("pick", feeds["pick"])
        binding.bind_output(b"best")
        session.run_with_iobinding(binding)
        answers.append(binding.copy_outputs_to_cpu())
    np.testing.assert_array_equal(answers[1][0], answers[0][0])


@pytest.mark.parametrize("names", ["best", b"best", [None], [1], ["best", 2.5]], ids=repr)
def test_output_names_onnxruntime_cannot_read_are_type_errors(names: Any) -> None:
    theirs, ours = _sessions(_decoder_step())
    arrays = _feeds()
    values = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in arrays.items()}
    for call, feeds in (("run", arrays), ("run_with_ort_values", values)):
        expected = _raised(lambda call=call, feeds=feeds: getattr(theirs, call)(names, feeds))
        assert type(expected) is TypeError  # onnxruntime's "incompatible function arguments"
        got = _raised(lambda call=call, feeds=feeds: getattr(ours, call)(names, feeds))
        assert isinstance(got, TypeError) and isinstance(got, dmlshim.BadInputError), got


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix, as clients still use it
@pytest.mark.parametrize(
    "convert",
    [np.asmatrix, lambda a: np.ma.masked_array(a, mask=np.zeros_like(a, bool))],
    ids=["matrix", "masked"],
)
def test_ndarray_subclass_feeds_read_as_their_buffer(convert: Any) -> None:
    """``np.matrix`` indices crashed the Gather kernel (a TypeError from deep inside); onnxruntime reads
    any ndarray subclass as the plain array it holds."""
    theirs, ours = _sessions(_decoder_step())
    feeds = _feeds()
    feeds["ids"] = convert(feeds["ids"])
    expected = theirs.run(None, feeds)
    got = ours.run(None, feeds)
    for g, e in zip(got, expected, strict=True):
        assert type(g) is np.ndarray and g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
    binding = ours.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("present")
    ours.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], expected[0])


def _without_opset() -> bytes:
    model = _decoder_step()
    del model.opset_import[:]
    return model.SerializeToString()


def _without_graph() -> bytes:
    model = onnx.ModelProto(ir_version=10)
    model.opset_import.add().version = 13
    return model.SerializeToString()


@pytest.mark.parametrize("source", ["empty", "no graph", "no opset", "folder"])
@pytest.mark.parametrize("as_file", [True, False], ids=["file", "bytes"])
def test_models_onnxruntime_refuses_raise_its_class(source: str, as_file: bool, tmp_path: Path) -> None:
    if source == "folder" and not as_file:
        pytest.skip("a folder is a path only")
    data = {"empty": b"", "no graph": _without_graph(), "no opset": _without_opset(), "folder": b""}[source]
    model: Any = data
    if as_file:
        model = tmp_path if source == "folder" else tmp_path / "model.onnx"
        if source != "folder":
            model.write_bytes(data)
        model = str(model)
    expected = _raised(lambda: onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]))
    got = _raised(lambda: dmlshim.InferenceSession(model))
    assert isinstance(got, type(expected)), (type(got).__mro__, type(expected))
    assert isinstance(got, dmlshim.BadModelError)


def _model_with_external_data(folder: Path) -> Path:
    model = _decoder_step()
    big = np.random.default_rng(0).standard_normal((4096, 4)).astype(np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(big, "table"))
    (folder / "weights").mkdir(parents=True)
    convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="weights/w.bin", size_threshold=1024
    )
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def _big_ids() -> dict[str, np.ndarray]:
    feeds = _feeds()
    feeds["ids"] = np.array([[4095, 0, -4096], [7, 8, 9]], np.int64)
    return feeds


def test_external_data_of_a_model_given_as_bytes_is_found_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime reads the external data of a model given as bytes from the working directory; dmlshim
    refused such a model ("given in memory, without the folder that file is in")."""
    path = _model_with_external_data(tmp_path / "model")
    monkeypatch.chdir(path.parent)
    data = path.read_bytes()
    expected = onnxruntime.InferenceSession(data, _options(), providers=["CPUExecutionProvider"]).run(
        None, _big_ids()
    )
    got = dmlshim.InferenceSession(data, _options()).run(None, _big_ids())
    assert [g.shape for g in got] == [(2, 5, 4), (2, 1, 1)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_external_data_of_a_model_given_as_bytes_elsewhere_raises_onnxruntimes_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _model_with_external_data(tmp_path / "model")
    monkeypatch.chdir(tmp_path)  # weights/w.bin is not found from here
    data = path.read_bytes()
    expected = _raised(lambda: onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]))
    got = _raised(lambda: dmlshim.InferenceSession(data))
    assert isinstance(got, type(expected)), (type(got).__mro__, type(expected))
    assert isinstance(got, dmlshim.BadModelError)
    # from its path, both run it, with the same answers
    expected_out = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, _big_ids()
    )
    got_out = dmlshim.InferenceSession(path).run(None, _big_ids())
    for g, e in zip(got_out, expected_out, strict=True):
        np.testing.assert_array_equal(g, e)


def _two_external_weights(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """The decoder step with its table and a second weight (a Gather's) both in ``w.bin``."""
    model = _decoder_step()
    table = np.random.default_rng(1).standard_normal((512, 4)).astype(np.float32)
    scale = np.random.default_rng(2).standard_normal((300,)).astype(np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(table, "table"))
    model.graph.initializer.append(numpy_helper.from_array(scale, "scale"))
    model.graph.initializer.append(numpy_helper.from_array(np.array([0, 299, -1], np.int64), "scale_at"))
    model.graph.node.append(helper.make_node("Gather", ["scale", "scale_at"], ["scaled"], axis=0, name="g2"))
    model.graph.output.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [3]))
    folder.mkdir(parents=True)
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="w.bin", size_threshold=1024)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx", table, scale


@pytest.mark.parametrize("whole", [True, False], ids=["whole file", "file too short"])
def test_external_data_files_in_memory_as_onnxruntime_reads_them(whole: bool, tmp_path: Path) -> None:
    """``add_external_initializers_from_files_in_memory`` with a file holding one of the two tensors the
    model keeps there: onnxruntime refuses the session (Fail); dmlshim read the other from disk and ran."""
    path, table, scale = _two_external_weights(tmp_path / "model")
    content = (-table).tobytes() + ((-scale).tobytes() if whole else b"")
    kept = []

    def options() -> onnxruntime.SessionOptions:
        so = _options()
        data = bytes(content)
        kept.append(data)
        so.add_external_initializers_from_files_in_memory(["w.bin"], [data], [len(data)])
        return so

    feeds = _feeds()
    if not whole:
        expected = _raised(
            lambda: onnxruntime.InferenceSession(path, options(), providers=["CPUExecutionProvider"])
        )
        got = _raised(lambda: dmlshim.InferenceSession(path, options()))
        assert isinstance(got, type(expected)), (type(got).__mro__, type(expected))
        return
    want = onnxruntime.InferenceSession(path, options(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got_out = dmlshim.InferenceSession(path, options()).run(None, feeds)
    np.testing.assert_array_equal(want[2], -scale[[0, 299, -1]])  # read from memory, not from w.bin
    for g, e in zip(got_out, want, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("strict", [None, "0", "1"])
def test_strict_shape_type_inference_refuses_what_onnxruntime_refuses(strict: str | None) -> None:
    """A Gather whose declared output shape disagrees with the inferred one: onnxruntime loads it, but not
    with ``session.strict_shape_type_inference = 1``; dmlshim's model check loaded it either way (the
    Gather runs emulated, so no onnxruntime partition saw the declaration)."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")],
        "declared_wrong",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])
    data = model.SerializeToString()

    def options() -> onnxruntime.SessionOptions:
        so = _options()
        if strict is not None:
            so.add_session_config_entry("session.strict_shape_type_inference", strict)
        return so

    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([2, -3], np.int64)}
    try:
        theirs = onnxruntime.InferenceSession(data, options(), providers=["CPUExecutionProvider"])
    except Exception as refused:  # onnxruntime's answer decides
        got = _raised(lambda: dmlshim.InferenceSession(data, options()))
        assert isinstance(got, type(refused)) and isinstance(got, dmlshim.BadModelError)
        assert strict == "1"
        return
    expected = theirs.run(None, feeds)
    np.testing.assert_array_equal(dmlshim.InferenceSession(data, options()).run(None, feeds)[0], expected[0])


def _bfloat16_gather() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g"),
            helper.make_node("Shape", ["y"], ["s"], name="shape"),
        ],
        "bf16_gather",
        [
            helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["k"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None),
            helper.make_tensor_value_info("s", TensorProto.INT64, None),
        ],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    return model.SerializeToString()


def _raw(value: onnxruntime.OrtValue, item_bytes: int) -> bytes:
    import ctypes

    return ctypes.string_at(value.data_ptr(), int(np.prod(value.shape())) * item_bytes)


@pytest.mark.parametrize("bound", ["allocated", "ortvalue"])
def test_iobinding_outputs_numpy_cannot_hold_come_back_as_ortvalues(bound: str) -> None:
    """A bfloat16 Gather output bound with bind_output or to an OrtValue: onnxruntime runs and get_outputs
    gives the OrtValue (copy_outputs_to_cpu is a RuntimeError); dmlshim refused the run."""
    data = _bfloat16_gather()
    raw = (np.arange(12, dtype=np.uint16) + 16256).reshape(3, 4)  # bfloat16 bits of 1.0, 1.0078, ...
    answers = []
    for session in (
        onnxruntime.InferenceSession(data, _options(), providers=["CPUExecutionProvider"]),
        dmlshim.InferenceSession(data, _options()),
    ):
        x = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, TensorProto.BFLOAT16)
        binding = session.io_binding()
        binding.bind_ortvalue_input("x", x)
        binding.bind_cpu_input("i", np.array([2, -3], np.int64))
        target = None
        if bound == "allocated":
            binding.bind_output("y")
        else:
            target = onnxruntime.OrtValue.ortvalue_from_shape_and_type([2, 4], TensorProto.BFLOAT16, "cpu", 0)
            binding.bind_ortvalue_output("y", target)
        binding.bind_output("s")
        session.run_with_iobinding(binding)
        y, s = binding.get_outputs()
        if target is not None:
            assert _raw(target, 2) == _raw(y, 2)
        copy_error = _raised(binding.copy_outputs_to_cpu)
        answers.append((y.data_type(), y.shape(), _raw(y, 2), s.numpy().tolist(), copy_error))
    theirs, ours = answers
    assert ours[:4] == theirs[:4]
    assert theirs[2] == raw[[2, 0]].tobytes()  # rows 2 and -3
    assert isinstance(ours[4], type(theirs[4])) and isinstance(theirs[4], RuntimeError)


def test_output_dimensions_shape_inference_cannot_name_are_none_as_onnxruntime_reports() -> None:
    """A Gather output whose first dimension comes from an unnamed index dimension: onnxruntime reports
    None there; dmlshim reported the name onnx's shape inference made up (``unk__0``)."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="g")],
        "unnamed_dims",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [None, "k"]),
        ],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])
    theirs, ours = _sessions(model)
    expected = [(o.name, o.type, o.shape) for o in theirs.get_outputs()]
    assert expected == [("g", "tensor(float)", [None, "k", 4])]
    assert [(o.name, o.type, o.shape) for o in ours.get_outputs()] == expected


@pytest.mark.parametrize("device", ["dml", "cuda", "gpu"])
def test_outputs_bound_to_another_device_are_allocated_on_the_cpu_as_onnxruntime(device: str) -> None:
    """A DirectML program binds its outputs with ``bind_output(name, "dml")``: onnxruntime's CPU package
    allocates them in CPU memory and runs; dmlshim refused the binding."""
    answers = []
    for session in _sessions(_decoder_step()):
        binding = session.io_binding()
        for name, value in _feeds().items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("present", device)
        binding.bind_output("best", device, 0)
        session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        answers.append(([o.device_name() for o in outputs], binding.copy_outputs_to_cpu()))
    (their_devices, theirs), (our_devices, ours) = answers
    assert our_devices == their_devices == ["cpu", "cpu"]
    for g, e in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("device", ["bogus", "DML"])
def test_output_devices_onnxruntime_does_not_know_are_refused(device: str) -> None:
    errors = []
    for session in _sessions(_decoder_step()):
        errors.append(_raised(lambda session=session: session.io_binding().bind_output("present", device)))
    assert type(errors[0]) is Exception  # onnxruntime's "Unsupported device type"
    assert isinstance(errors[1], Exception) and isinstance(errors[1], dmlshim.DmlShimError)


def _string_gather() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["s", "i"], ["g"], axis=0, name="g")],
        "string_gather",
        [
            helper.make_tensor_value_info("s", TensorProto.STRING, ["k"]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["j"]),
        ],
        [helper.make_tensor_value_info("g", TensorProto.STRING, None)],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])


def test_numpy_bytes_feed_for_a_string_input() -> None:
    """A numpy bytes array (dtype S) fed to a string input crashed the Gather kernel (a ValueError from
    deep inside); onnxruntime takes it. Each element here is NUL-padded within its width, the case where
    onnxruntime reads exactly the strings (it reads each element up to a NUL)."""
    theirs, ours = _sessions(_string_gather())
    feeds = {"s": np.array([b"a", b"bb", "\u00e9".encode()], dtype="S3"), "i": np.array([2, -3, 1], np.int64)}
    expected = theirs.run(None, feeds)[0]
    got = ours.run(None, feeds)[0]
    assert expected.tolist() == ["\u00e9", "a", "bb"]
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


@pytest.mark.parametrize("value", [np.array([1.5, 2.0]), np.array([1, 2])], ids=["float", "int"])
def test_numbers_fed_to_a_string_input_are_refused_as_onnxruntime(value: np.ndarray) -> None:
    """dmlshim ran the model on them (a string input has no numpy dtype to compare with)."""
    theirs, ours = _sessions(_string_gather())
    feeds = {"s": value, "i": np.array([0], np.int64)}
    expected = _raised(lambda: theirs.run(None, feeds))
    got = _raised(lambda: ours.run(None, feeds))
    assert isinstance(got, type(expected)) and isinstance(got, dmlshim.BadInputError)


def _strings_from_numbers() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING, name="cast"),
            helper.make_node("Gather", ["s", "i"], ["g"], axis=0, name="g"),
        ],
        "strings_from_numbers",
        [
            helper.make_tensor_value_info("x", TensorProto.INT64, ["k"]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["j"]),
        ],
        [helper.make_tensor_value_info("g", TensorProto.STRING, None)],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("indices", [[2, -3, 1], []], ids=["three", "none"])
def test_string_outputs_come_back_as_ortvalues_as_onnxruntime(indices: list[int]) -> None:
    """run_with_ort_values and IOBinding.get_outputs() give a string output as an OrtValue in
    onnxruntime; dmlshim refused (numpy OrtValue factories take no strings)."""
    theirs, ours = _sessions(_strings_from_numbers())
    arrays = {"x": np.array([10, -20, 30], np.int64), "i": np.array(indices, np.int64)}
    values = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in arrays.items()}
    answers = []
    for session in (theirs, ours):
        (out,) = session.run_with_ort_values(None, values)
        binding = binding_with_inputs(session, values)
        binding.bind_output("g")
        session.run_with_iobinding(binding)
        (bound,) = binding.get_outputs()
        answers.append([(o.data_type(), o.shape(), o.numpy().tolist()) for o in (out, bound)])
    assert answers[1] == answers[0]
    if indices:
        assert answers[0][0] == ("tensor(string)", [3], ["30", "10", "-20"])
