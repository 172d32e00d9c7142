"""``dmlshim.InferenceSession`` against ``onnxruntime.InferenceSession``: every public attribute exists,
and each method gives onnxruntime's answer (onnxruntime CPU, single-threaded, is the reference) or a
DmlShimError saying what to do instead."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim import BadInputError, DmlShimError, InferenceSession, NotSupportedError
from tests.oracle import IR_VERSION

REPO = Path(__file__).resolve().parents[1]
DECODER = REPO / "onnx_models" / "tiny_decoder_step.onnx"


def single_thread() -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def reference(model: str | bytes) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(model, single_thread(), providers=["CPUExecutionProvider"])


def decoder_feeds() -> dict[str, np.ndarray]:
    with np.load(REPO / "onnx_models" / "tiny_decoder_step.npz") as z:
        return {k: z[k] for k in z.files}


def overridable_model(version: int | None = 7) -> onnx.ModelProto:
    """Gather from a weight that is also a graph input (overridable), with metadata set."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["g"], name="gather", axis=0),
            helper.make_node("Add", ["g", "x"], ["y"], name="add"),
        ],
        "meta_graph",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")],
        doc_string="graph doc",
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    model.producer_name, model.producer_version, model.domain = "tests", "1.0", "org.example"
    model.doc_string = "model doc"
    if version is not None:
        model.model_version = version
    helper.set_model_props(model, {"author": "me", "license": "none"})
    return model


OVERRIDE_FEEDS = {"x": np.ones((2, 3), np.float32), "i": np.array([3, 1], np.int64)}


# --- The surface. -------------------------------------------------------------------------------


def test_every_public_onnxruntime_attribute_exists() -> None:
    theirs = {a for a in dir(onnxruntime.InferenceSession) if not a.startswith("_")}
    missing = sorted(a for a in theirs if not hasattr(InferenceSession, a))
    assert not missing, f"missing on dmlshim.InferenceSession: {missing}"
    binding = {a for a in dir(onnxruntime.IOBinding) if not a.startswith("_")}
    assert not sorted(a for a in binding if not hasattr(dmlshim.IOBinding, a))


def test_signature_order_is_onnxruntimes() -> None:
    ours = list(inspect.signature(InferenceSession.__init__).parameters)
    theirs = list(inspect.signature(onnxruntime.InferenceSession.__init__).parameters)
    want = ["self", "path_or_bytes", "sess_options", "providers", "provider_options"]
    assert ours[:5] == theirs[:5] == want
    for name in ("feature_level", "engine", "index_mode"):
        kind = inspect.signature(InferenceSession.__init__).parameters[name].kind
        assert kind is inspect.Parameter.KEYWORD_ONLY


def test_module_names_a_script_uses() -> None:
    for name in ("SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "OrtValue"):
        assert getattr(dmlshim, name) is getattr(onnxruntime, name)
    real = [p for p in onnxruntime.get_available_providers() if p != "DmlExecutionProvider"]
    assert dmlshim.get_available_providers() == ["DmlExecutionProvider", *real]
    assert "CPUExecutionProvider" in real
    assert dmlshim.get_device() == "CPU-DML"
    assert dmlshim.get_version_string() == onnxruntime.get_version_string()
    assert isinstance(dmlshim.__version__, str)
    script_names = ["InferenceSession", "SessionOptions", "RunOptions", "get_available_providers", "OrtValue"]
    assert all(name in dir(dmlshim) for name in script_names)


# --- Construction. ------------------------------------------------------------------------------


def test_positional_session_options_and_path_forms(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    model = overridable_model()
    onnx.save(model, str(path))
    want = reference(model.SerializeToString()).run(None, OVERRIDE_FEEDS)
    for source in (str(path), path, path.read_bytes(), model):
        got = InferenceSession(source, single_thread(), ["DmlExecutionProvider"]).run(None, OVERRIDE_FEEDS)
        np.testing.assert_array_equal(got[0], want[0])


def test_feature_level_in_the_options_slot_says_what_to_write() -> None:
    with pytest.raises(BadInputError, match=r"feature_level='4_0'"):
        InferenceSession(overridable_model(), "4_0")  # type: ignore[arg-type]


def test_keyword_arguments() -> None:
    model = overridable_model()
    InferenceSession(model, enable_fallback=0)
    with pytest.raises(BadInputError, match="unknown keyword argument"):
        InferenceSession(model, feature_levl="4_0")
    InferenceSession(
        model, disabled_optimizers=["ConstantFolding"]
    )  # as onnxruntime (test_ort_binding_clients)


# --- Providers. ---------------------------------------------------------------------------------


def test_an_unavailable_provider_is_dropped_with_a_warning_as_onnxruntime_does() -> None:
    model = overridable_model().SerializeToString()
    asked = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        ours = InferenceSession(model, providers=asked)
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        theirs = onnxruntime.InferenceSession(model, providers=asked)
    assert ours.get_providers() == theirs.get_providers() == ["CPUExecutionProvider"]


def test_every_available_provider_list_is_accepted() -> None:
    model = overridable_model().SerializeToString()
    real = onnxruntime.get_available_providers()  # AzureExecutionProvider among them here
    want = reference(model).run(None, OVERRIDE_FEEDS)
    ours = InferenceSession(model, providers=dmlshim.get_available_providers())
    assert ours.get_providers() == ["DmlExecutionProvider", *[p for p in real if p != "DmlExecutionProvider"]]
    np.testing.assert_array_equal(ours.run(None, OVERRIDE_FEEDS)[0], want[0])
    others = [(p, {}) for p in reversed(real) if p != "CPUExecutionProvider"]
    reordered = [("CPUExecutionProvider", {}), *others]
    cpu_only = InferenceSession(model, providers=reordered)
    theirs = onnxruntime.InferenceSession(model, providers=reordered)
    assert cpu_only.get_providers() == theirs.get_providers()
    np.testing.assert_array_equal(cpu_only.run(None, OVERRIDE_FEEDS)[0], want[0])


@pytest.mark.parametrize(
    ("providers", "provider_options", "fragment"),
    [
        ("DmlExecutionProvider", None, "must be a list"),
        (["DmlExecutionProvider"], [{}, {}], "provider_options 2"),
        ([("DmlExecutionProvider", {})], [{}], "names only"),
        ([42], None, "name or a"),
    ],
)
def test_malformed_providers(providers: object, provider_options: object, fragment: str) -> None:
    """onnxruntime's constructor falls back to its CPU provider when the providers are malformed (it prints
    "EP Error ... Falling back"): so does dmlshim's, with a warning; without the fallback it is refused."""
    model = overridable_model().SerializeToString()
    theirs = onnxruntime.InferenceSession(model, providers=providers, provider_options=provider_options)  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="falling back"):
        ours = InferenceSession(model, providers=providers, provider_options=provider_options)  # type: ignore[arg-type]
    assert ours.get_providers() == theirs.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(ours.run(None, OVERRIDE_FEEDS)[0], theirs.run(None, OVERRIDE_FEEDS)[0])
    with pytest.raises(BadInputError, match=fragment):
        InferenceSession(model, providers=providers, provider_options=provider_options, enable_fallback=False)  # type: ignore[arg-type]


def test_provider_options_both_forms() -> None:
    model = overridable_model()
    tuples = InferenceSession(model, providers=[("DmlExecutionProvider", {"device_id": 0})])
    listed = InferenceSession(
        model,
        providers=["DmlExecutionProvider", "CPUExecutionProvider"],
        provider_options=[{"device_id": 0}, {}],
    )
    # as onnxruntime(-directml) reports them: neither provider reports the options it was given
    want = {"DmlExecutionProvider": {}, "CPUExecutionProvider": {}}
    assert tuples.get_provider_options() == listed.get_provider_options() == want
    assert tuples.get_providers() == ["DmlExecutionProvider", "CPUExecutionProvider"]


def test_cpu_provider_alone_emulates_nothing_and_set_providers_switches() -> None:
    feeds = decoder_feeds()
    want = reference(str(DECODER)).run(None, feeds)
    sess = InferenceSession(DECODER, single_thread(), providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    for got, w in zip(sess.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, w)
    record = sess.last_run_record
    assert record is not None and record.nodes and not record.emulated
    assert {n.status for n in record.nodes} == {"cpu_provider_only"}

    sess.set_providers(["DmlExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["DmlExecutionProvider", "CPUExecutionProvider"]
    for got, w in zip(sess.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, w)
    record = sess.last_run_record
    assert record is not None and len(record.emulated) == len(record.nodes) == 5
    with pytest.warns(UserWarning, match="TensorrtExecutionProvider"):
        sess.set_providers(["TensorrtExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


# --- Description. -------------------------------------------------------------------------------


def _args(args: object) -> list[tuple[str, str, list[object]]]:
    out = []
    for a in args:  # type: ignore[attr-defined]
        assert isinstance(a.shape, list)
        out.append((a.name, a.type, a.shape))
    return out


@pytest.mark.parametrize("version", [7, 0, None])
def test_description_matches_onnxruntime(version: int | None) -> None:
    model = overridable_model(version)
    ours = InferenceSession(model)
    theirs = reference(model.SerializeToString())
    assert _args(ours.get_inputs()) == _args(theirs.get_inputs())
    assert _args(ours.get_outputs()) == _args(theirs.get_outputs())
    assert _args(ours.get_overridable_initializers()) == _args(theirs.get_overridable_initializers())
    fields = ("producer_name", "graph_name", "domain", "description", "graph_description", "version")
    for name in (*fields, "custom_metadata_map"):
        assert getattr(ours.get_modelmeta(), name) == getattr(theirs.get_modelmeta(), name), name
    assert repr(ours.get_inputs()[0]) == "NodeArg(name='x', type='tensor(float)', shape=['N', 3])"


@pytest.mark.skipif(
    not hasattr(onnxruntime.InferenceSession, "get_input_memory_infos"),
    reason=f"onnxruntime {onnxruntime.__version__} has no get_input_memory_infos or get_input_epdevices "
    "(added in onnxruntime 1.23)",
)
@pytest.mark.parametrize("version", [7, None])
def test_memory_infos_and_devices_match_onnxruntime(version: int | None) -> None:
    model = overridable_model(version)
    ours = InferenceSession(model)
    theirs = reference(model.SerializeToString())
    assert len(ours.get_input_memory_infos()) == len(theirs.get_input_memory_infos())
    mem = [[m.name for m in s.get_output_memory_infos()] for s in (ours, theirs)]
    assert mem[0] == mem[1]
    devices = [[d.ep_name for d in s.get_input_epdevices()] for s in (ours, theirs)]
    assert devices[0] == devices[1]


def test_ep_devices_before_onnxruntime_1_23_say_which_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime 1.20-1.22 have no OrtEpDevice: one sentence naming the version, not an AttributeError."""
    monkeypatch.delattr(onnxruntime, "get_ep_devices", raising=False)
    sess = InferenceSession(overridable_model())
    with pytest.raises(NotSupportedError, match=r"needs onnxruntime 1\.23 or newer") as info:
        sess.get_input_epdevices()
    assert onnxruntime.__version__ in str(info.value) and "\n" not in str(info.value)
    assert len(sess.get_input_memory_infos()) == len(sess.get_inputs())  # these need nothing newer


def test_session_options_are_returned() -> None:
    so = single_thread()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    got = InferenceSession(overridable_model(), so).get_session_options()
    assert got.intra_op_num_threads == 1
    assert got.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    default = InferenceSession(overridable_model()).get_session_options()
    assert default.intra_op_num_threads == onnxruntime.SessionOptions().intra_op_num_threads


def test_graph_assignment_needs_the_config_entry_then_lists_emulated_nodes() -> None:
    with pytest.raises(
        onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="record_ep_graph_assignment_info"
    ):
        InferenceSession(overridable_model()).get_provider_graph_assignment_info()  # onnxruntime's class
    so = single_thread()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    subgraphs = InferenceSession(overridable_model(), so).get_provider_graph_assignment_info()
    placed = {s.ep_name: [(n.name, n.op_type) for n in s.get_nodes()] for s in subgraphs}
    want = {"DmlExecutionProvider": [("gather", "Gather")], "CPUExecutionProvider": [("add", "Add")]}
    assert placed == want


# --- Running. -----------------------------------------------------------------------------------


@pytest.mark.parametrize("output_names", [None, [], ["new_value_cache", "candidate_ids"]])
def test_run_output_names(output_names: list[str] | None) -> None:
    feeds = decoder_feeds()
    want = reference(str(DECODER)).run(output_names, feeds)
    got = InferenceSession(DECODER, single_thread()).run(output_names, feeds)
    assert len(got) == len(want) == (2 if output_names else 4)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_ortvalue_inputs_and_outputs() -> None:
    feeds = decoder_feeds()
    values = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    want = reference(str(DECODER)).run_with_ort_values(["candidate_logprobs"], values)
    sess = InferenceSession(DECODER, single_thread())
    got = sess.run_with_ort_values(["candidate_logprobs"], values)
    assert isinstance(got[0], onnxruntime.OrtValue)
    assert got[0].shape() == want[0].shape() and got[0].data_type() == want[0].data_type()
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(sess.run(["candidate_logprobs"], values)[0], want[0].numpy())


def test_run_with_ortvaluevector() -> None:
    from onnxruntime.capi import _pybind_state as C

    feeds = decoder_feeds()
    names = list(feeds)
    vector = C.OrtValueVector()
    for name in names:
        vector.push_back(onnxruntime.OrtValue.ortvalue_from_numpy(feeds[name])._get_c_value())
    fetches = C.OrtValueVector()
    sess = InferenceSession(DECODER, single_thread())
    sess.run_with_ortvaluevector(None, names, vector, ["candidate_logprobs"], fetches, [])
    want = reference(str(DECODER)).run(["candidate_logprobs"], feeds)[0]
    np.testing.assert_array_equal(onnxruntime.OrtValue(fetches[0]).numpy(), want)


def test_run_async_calls_back_with_results_and_errors() -> None:
    feeds = decoder_feeds()
    want = reference(str(DECODER)).run(None, feeds)
    so = single_thread()
    so.intra_op_num_threads = 2  # onnxruntime refuses run_async on a one-thread pool
    sess = InferenceSession(DECODER, so)
    done = threading.Event()
    seen: dict[str, object] = {}

    def callback(results: list[np.ndarray], user_data: object, error: str) -> None:
        seen.update(results=results, user_data=user_data, error=error)
        done.set()

    sess.run_async(None, feeds, callback, "token")
    assert done.wait(60)
    assert seen["error"] == "" and seen["user_data"] == "token"
    for g, w in zip(seen["results"], want, strict=True):  # type: ignore[call-overload]
        np.testing.assert_array_equal(g, w)

    done.clear()
    bad = dict(feeds, input_ids=np.array([[99]], np.int64))  # the embedding has 32 rows
    sess.run_async(None, bad, callback, None)
    assert done.wait(60)
    assert seen["results"] == [] and "out of range" in str(seen["error"])
    with pytest.raises(BadInputError, match="missing feed"):
        sess.run_async(None, {}, callback, None)


def test_iobinding_matches_onnxruntime() -> None:
    feeds = decoder_feeds()
    theirs = reference(str(DECODER))
    ours = InferenceSession(DECODER, single_thread())
    keys_out = np.full((1, 2, 8, 8), -1, np.float32)  # pre-allocated memory, as a pointer
    values_out = onnxruntime.OrtValue.ortvalue_from_shape_and_type([1, 2, 8, 8], np.float32, "cpu")
    results = []
    for sess in (theirs, ours):
        binding = sess.io_binding()
        keys_out[...] = -1
        binding.bind_cpu_input("input_ids", feeds["input_ids"])
        kc = feeds["key_cache"]
        binding.bind_input("key_cache", "cpu", 0, np.float32, list(kc.shape), kc.ctypes.data)
        vc = onnxruntime.OrtValue.ortvalue_from_numpy(feeds["value_cache"])
        binding.bind_ortvalue_input("value_cache", vc)
        binding.bind_cpu_input("cache_position", feeds["cache_position"])
        binding.bind_cpu_input("attention_mask", feeds["attention_mask"])
        binding.bind_output("candidate_logprobs")
        binding.bind_output("new_key_cache", "cpu", 0, np.float32, [1, 2, 8, 8], keys_out.ctypes.data)
        binding.bind_ortvalue_output("new_value_cache", values_out)
        binding.synchronize_inputs()
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        copied = binding.copy_outputs_to_cpu()
        values = [v.numpy() for v in binding.get_outputs()]
        assert [c.shape for c in copied] == [(1, 4), (1, 2, 8, 8), (1, 2, 8, 8)]
        results.append((copied, values, keys_out.copy(), values_out.numpy().copy()))
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
    (t_copied, t_values, t_keys, t_vals), (o_copied, o_values, o_keys, o_vals) = results
    theirs_all = [*t_copied, *t_values, t_keys, t_vals]
    for a, b in zip(theirs_all, [*o_copied, *o_values, o_keys, o_vals], strict=True):
        np.testing.assert_array_equal(b, a)
    assert not np.all(o_keys == -1)


def test_iobinding_errors() -> None:
    sess = InferenceSession(DECODER, single_thread())
    binding = sess.io_binding()
    with pytest.raises(BadInputError, match="at least one output"):
        sess.run_with_iobinding(binding)
    with pytest.raises(BadInputError, match="this session"):
        InferenceSession(DECODER).run_with_iobinding(binding)
    memory = np.zeros(4, np.int64)  # memory on another device: a pointer dmlshim cannot write through
    with pytest.raises(NotSupportedError, match="runs on the CPU"):
        binding.bind_output("candidate_ids", "cuda", 0, np.int64, [4], memory.ctypes.data)
    with pytest.raises(NotSupportedError, match="get_outputs\\(\\)"):
        binding.get_outputs_as_ortvaluevector()
    with pytest.raises(NotSupportedError, match="device_type='cpu'"):
        sess.create_ortvalue_from_shape_and_type([2], np.float32, "cuda")
    with pytest.raises(BadInputError, match="cannot create an OrtValue"):
        sess.create_ortvalue_from_shape_and_type([2], "no such type", "cpu")
    value = sess.create_ortvalue_from_shape_and_type([2, 3], np.float32, "cpu")
    assert value.shape() == [2, 3] and value.device_name() == "cpu"


def test_compatibility_methods_behave_like_the_cpu_provider() -> None:
    sess = InferenceSession(overridable_model())
    theirs = reference(overridable_model().SerializeToString())
    assert sess.get_tuning_results() == theirs.get_tuning_results() == []
    sess.set_tuning_results([])
    sess.set_ep_dynamic_options({"ep.dynamic.workload_type": "Default"})
    sess.release_captured_graph()
    sess.disable_fallback()
    sess.enable_fallback()
    assert sess.end_profiling() == theirs.end_profiling() == ""
    assert sess.get_profiling_start_time_ns() == 0


def test_every_error_is_a_dmlshim_error() -> None:
    # onnxruntime's NotImplemented is no Python NotImplementedError: neither is dmlshim's error for it
    assert issubclass(NotSupportedError, DmlShimError) and not issubclass(
        NotSupportedError, NotImplementedError
    )
    sess = InferenceSession(overridable_model())
    for call in (
        lambda: sess.run(["nope"], OVERRIDE_FEEDS),
        lambda: sess.run("y", OVERRIDE_FEEDS),  # type: ignore[arg-type]
        lambda: sess.run(None, {}),
        lambda: sess.run(None, dict(OVERRIDE_FEEDS, i=np.array([9, 0], np.int64))),
    ):
        with pytest.raises(DmlShimError):
            call()


def test_run_options_terminate_stops_the_run_as_in_onnxruntime() -> None:
    feeds = decoder_feeds()
    ro = onnxruntime.RunOptions()
    ro.terminate = True
    with pytest.raises(Exception, match="terminate flag"):
        reference(str(DECODER)).run(None, feeds, ro)
    sess = InferenceSession(DECODER, single_thread())
    with pytest.raises(DmlShimError, match="terminate flag"):
        sess.run(None, feeds, ro)
    assert sess.last_run_record is None
    ro.terminate = False
    ro.log_severity_level = 3
    assert len(sess.run(None, feeds, ro)) == 4


SHIPPED = sorted(
    str(p.relative_to(REPO / "onnx_models"))
    for p in [*(REPO / "onnx_models").glob("*.onnx"), *(REPO / "onnx_models" / "real").glob("*.onnx")]
)


@pytest.mark.parametrize("model", SHIPPED)
def test_shipped_models_are_described_as_onnxruntime_describes_them(model: str) -> None:
    """Names, types and shapes (declared dimensions completed by inference, as onnxruntime does: the
    torchscript GNN declares its output ``[Gemmgraph_logits_dim_0, 3]``, onnxruntime says ``[4, 3]``)."""
    path = str(REPO / "onnx_models" / model)
    ours = InferenceSession(path)
    theirs = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for what in ("get_inputs", "get_outputs", "get_overridable_initializers"):
        assert _args(getattr(ours, what)()) == _args(getattr(theirs, what)()), what
    fields = ("producer_name", "graph_name", "domain", "description", "graph_description", "version")
    for name in (*fields, "custom_metadata_map"):
        assert getattr(ours.get_modelmeta(), name) == getattr(theirs.get_modelmeta(), name), name
