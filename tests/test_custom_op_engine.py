"""The custom-op engine (gather/scatter lowered to onnxruntime-extensions Python ops, one onnxruntime
session), compared bit for bit with onnxruntime CPU, single-threaded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime_extensions")

from dmlshim import FeatureLevel, IndexOutOfRangeError
from dmlshim.dml.json_form import operator_from_json
from dmlshim.execute.custom_ops import types as custom_op_types
from dmlshim.execute.custom_ops.types import outputs_cross_as_arrays
from dmlshim.execute.engine import EngineConfig
from dmlshim.execute.engines.custom_op import CustomOpEngine, create_engine
from dmlshim.execute.lowering.lower import CUSTOM_DOMAIN, lower_model
from dmlshim.execute.record import RunRecord
from dmlshim.kernels.options import IndexMode
from tests.oracle import ort_run, ort_session
from tests.test_session_models import (
    assert_bitwise,
    chain_model,
    loop_model,
    make_model,
    random_model,
    special_floats,
)

MODELS = sorted((Path(__file__).resolve().parents[1] / "onnx_models").glob("*.onnx"))


def single_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def engine(
    model: onnx.ModelProto, fl: FeatureLevel = FeatureLevel.FL_5_0, **kwargs: object
) -> CustomOpEngine:
    return CustomOpEngine(model, fl, sess_options=single_thread(), **kwargs)  # type: ignore[arg-type]


def run_all(
    eng: CustomOpEngine, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
) -> tuple[list[np.ndarray], RunRecord]:
    return eng.run([o.name for o in model.graph.output], feeds)


def check(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], fl: FeatureLevel = FeatureLevel.FL_5_0
) -> RunRecord:
    got, record = run_all(engine(model, fl), model, feeds)
    assert_bitwise(got, ort_run(model, feeds))
    return record


@pytest.mark.skipif(not MODELS, reason="onnx_models/ holds no models")
@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_shipped_models_match_onnxruntime(path: Path) -> None:
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    model = onnx.load(str(path))
    got, record = run_all(engine(model), model, feeds)
    assert_bitwise(got, ort_session(str(path)).run([o.name for o in model.graph.output], feeds))
    assert record.engine == "customop"
    for node in record.nodes:
        if node.placement == "dml":
            assert node.operator and node.operator.startswith("DML_OPERATOR_")
        else:
            assert node.reasons and node.reasons[-1][0] == "not_lowered"


def test_loop_body_scatternd_runs_as_custom_op() -> None:
    model, feeds = loop_model()
    record = check(model, feeds)
    by_name = {n.name: n for n in record.nodes}
    assert [n.name for n in record.nodes] == ["loop/body/gather_row", "loop/body/scatter_row", "gather_after"]
    assert all(n.placement == "dml" for n in record.nodes)
    assert by_name["loop/body/scatter_row"].operator == "DML_OPERATOR_SCATTER_ND"


def test_error_inside_loop_body_names_the_node() -> None:
    model, feeds = loop_model()
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array(5, dtype=np.int64), "trip"))
    eng = engine(model)
    with pytest.raises(IndexOutOfRangeError) as info:
        run_all(eng, model, feeds)
    assert info.value.node == "loop/body/gather_row"
    # The engine stays usable after a failed run.
    model_ok, _ = loop_model()
    got, _ = run_all(engine(model_ok), model_ok, feeds)
    assert_bitwise(got, ort_run(model_ok, feeds))


@pytest.mark.parametrize("seed", range(6))
def test_random_models_match_onnxruntime(seed: int) -> None:
    model, feeds = random_model(seed)
    record = check(model, feeds)
    assert all(n.placement == "dml" and n.operator for n in record.nodes)


def test_chain_at_low_feature_levels() -> None:
    model, feeds = chain_model()
    for fl in (FeatureLevel.FL_3_0, FeatureLevel.FL_4_1, FeatureLevel.FL_6_4):
        check(model, feeds, fl)


def _gather_elements(elem: int, data: np.ndarray, fl: FeatureLevel = FeatureLevel.FL_5_0) -> None:
    idx = np.array([[2, 0, 1], [1, 1, 0]], dtype=np.int64)
    model = make_model(
        [helper.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=0)],
        {"d": (elem, list(data.shape)), "i": (TensorProto.INT64, [2, 3])},
        ["y"],
    )
    record = check(model, {"d": data, "i": idx}, fl)
    assert record.nodes[0].placement == "dml"


@pytest.mark.parametrize(
    ("elem", "values"),
    [
        (TensorProto.FLOAT, [np.nan, -np.inf, np.inf, -0.0, 1.5, -2.0, 3.0, 4.0, 5.0]),
        (TensorProto.DOUBLE, [np.nan, -np.inf, np.inf, -0.0, 1e300, -2.0, 3.0, 4.0, 5.0]),
        (TensorProto.FLOAT16, [np.nan, -np.inf, np.inf, -0.0, 65504.0, 6e-8, 3.0, 4.0, 5.0]),
        (TensorProto.UINT64, [2**64 - 1, 2**63, 2**53 + 1, 0, 1, 2, 3, 4, 5]),
        (TensorProto.INT64, [-(2**63), 2**63 - 1, 2**53 + 1, 0, -1, 2, 3, 4, 5]),
        (TensorProto.INT8, [-128, 127, 0, 1, 2, 3, 4, 5, 6]),
        (TensorProto.UINT16, [65535, 0, 1, 2, 3, 4, 5, 6, 7]),
        (TensorProto.BOOL, [True, False, True, False, False, True, True, True, False]),
    ],
    ids=["float32", "float64", "float16", "uint64", "int64", "int8", "uint16", "bool"],
)
def test_element_types_cross_the_bridge_exactly(elem: int, values: list[object]) -> None:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    data = np.array(values, dtype=dtype).reshape(3, 3)
    if elem == TensorProto.FLOAT:
        # NaNs with payloads and sign survive (quiet NaNs; see the README on signaling ones).
        data.reshape(-1)[[1, 4]] = np.array([0x7FC01234, 0xFFC00001], dtype=np.uint32).view(np.float32)
    _gather_elements(elem, data)
    if elem in (TensorProto.INT64, TensorProto.UINT64, TensorProto.DOUBLE):
        _gather_elements(elem, data, FeatureLevel.FL_3_0)  # 64-bit data as UINT32 pairs


def test_symbolic_batch_translated_at_run_time_and_cached() -> None:
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Gather", ["r", "i"], ["y"], name="gather", axis=0),
        ],
        {"x": (TensorProto.FLOAT, ["batch", 4]), "i": (TensorProto.INT64, ["n"])},
        ["y"],
    )
    eng = engine(model)
    # float32 data crosses the bridge as arrays, every bit kept (tags mode, onnxruntime moving the floats,
    # where outputs would cross as Python lists), translated at run time.
    mode = "translate" if outputs_cross_as_arrays() else "tags"
    assert eng.lowered.nodes[0].dynamic and eng.lowered.nodes[0].mode == mode
    rng = np.random.default_rng(3)
    for batch, expected_new in ((5, 1), (5, 0), (2, 1)):
        feeds = {"x": special_floats(rng, (batch, 4)), "i": np.array([batch - 1, 0, -1], dtype=np.int64)}
        got, record = run_all(eng, model, feeds)
        assert_bitwise(got, ort_run(model, feeds))
        assert record.translations_computed == expected_new
        assert record.nodes[0].operator == "DML_OPERATOR_GATHER"
        assert record.nodes[0].negative_indices
    # An empty index tensor has no DirectML descriptor: the node is computed on the CPU for that run.
    feeds = {"x": special_floats(rng, (3, 4)), "i": np.zeros((0,), dtype=np.int64)}
    got, record = run_all(eng, model, feeds)
    assert_bitwise(got, ort_run(model, feeds))
    assert record.nodes[0].placement == "onnxruntime-cpu"
    assert record.nodes[0].reasons[-1][0] == "runtime_fallback"


def test_out_of_range_index_error_and_clamp() -> None:
    model = make_model(
        [helper.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=1)],
        {"d": (TensorProto.FLOAT, [2, 3]), "i": (TensorProto.INT64, [2, 2])},
        ["y"],
    )
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    bad: dict[str, np.ndarray] = {"d": data, "i": np.array([[0, 7], [1, 2]], dtype=np.int64)}
    with pytest.raises(IndexOutOfRangeError) as info:
        run_all(engine(model), model, bad)
    assert info.value.node == "ge" and "ge" in str(info.value)
    got, _ = run_all(engine(model, index_mode=IndexMode.CLAMP), model, bad)
    np.testing.assert_array_equal(got[0], np.array([[0, 2], [4, 5]], dtype=np.float32))


def test_duplicate_scatter_writes_are_recorded() -> None:
    model = make_model(
        [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="snd")],
        {
            "d": (TensorProto.FLOAT, [4, 2]),
            "i": (TensorProto.INT64, [3, 1]),
            "u": (TensorProto.FLOAT, [3, 2]),
        },
        ["y"],
    )
    feeds: dict[str, np.ndarray] = {
        "d": np.zeros((4, 2), np.float32),
        "i": np.array([[1], [3], [3]], np.int64),
        "u": np.ones((3, 2), np.float32),
    }
    _, record = run_all(engine(model), model, feeds)
    assert record.nodes[0].duplicate_indices == 1  # one slice write overwritten by a later one


def test_fallback_node_is_kept_and_reported() -> None:
    model = make_model(
        [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="sadd", axis=0, reduction="add")],
        {"d": (TensorProto.FLOAT, [4]), "i": (TensorProto.INT64, [3]), "u": (TensorProto.FLOAT, [3])},
        ["y"],
    )
    feeds: dict[str, np.ndarray] = {
        "d": np.zeros(4, np.float32),
        "i": np.array([1, 1, 2], np.int64),
        "u": np.ones(3, np.float32),
    }
    record = check(model, feeds)
    node = record.nodes[0]
    assert node.placement == "onnxruntime-cpu" and node.status == "fallback"
    assert not any(n.domain == CUSTOM_DOMAIN for n in lower_model(model).model.graph.node)


def test_no_gather_scatter_and_output_straight_from_gather() -> None:
    plain = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.FLOAT, [3])}, ["y"])
    record = check(plain, {"x": np.array([-1, 0, 2], np.float32)})
    assert record.nodes == ()
    direct = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        {"x": (TensorProto.FLOAT, [3, 2]), "i": (TensorProto.INT64, [])},
        ["y"],
    )
    check(direct, {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "i": np.array(-1, np.int64)})


@pytest.mark.parametrize("arrays", [True, False], ids=["array-bridge", "list-bridge"])
def test_lowered_model_carries_the_descriptor(arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(custom_op_types, "outputs_cross_as_arrays", lambda: arrays)
    model, _ = chain_model()
    lowered = lower_model(model)
    onnx.checker.check_model(lowered.model, full_check=True)
    custom = [n for n in lowered.model.graph.node if n.domain == CUSTOM_DOMAIN]
    # Where outputs would cross as Python lists, float data is lowered in tags mode: the custom op returns
    # positions, onnxruntime moves the floats.
    mode = b"descriptor" if arrays else b"tags"
    expected = (
        ["DmlGather_float32_int64", "DmlScatterND_float32_int64"]
        if arrays
        else ["DmlTagsGather_int64", "DmlTagsScatterND_int64"]
    )
    assert [n.op_type for n in custom] == expected
    by_name = {n.name: n for n in lowered.nodes}
    for node in custom:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        t = by_name[attrs["node_name"].decode()].translation
        assert operator_from_json(json.loads(attrs["descriptor"])) == t.operator
        assert attrs["onnx_op_type"].decode() == t.op_type and attrs["mode"] == mode
        assert t.operator is not None
        assert attrs["dml_operator"].decode() == t.operator.operator_type.dml_name
    assert any(n.op_type == "Reshape" for n in lowered.model.graph.node)


def test_engine_factory_and_providers() -> None:
    model, feeds = chain_model()
    eng = create_engine(model, EngineConfig(feature_level=FeatureLevel.FL_5_0, sess_options=single_thread()))
    assert eng.name == "customop"
    assert eng.get_providers() == ["DmlShimExecutionProvider", "CPUExecutionProvider"]
    got, _ = eng.run(["y"], feeds)
    assert_bitwise(got, ort_run(model, feeds))


def test_inference_session_with_the_customop_engine() -> None:
    from dmlshim import InferenceSession
    from dmlshim.execute.engine import register_engine

    register_engine("customop", "dmlshim.execute.engines.custom_op:create_engine")
    model, feeds = loop_model()
    sess = InferenceSession(model, engine="customop", sess_options=single_thread())
    assert_bitwise(sess.run(None, feeds), ort_run(model, feeds))
    record = sess.last_run_record
    assert record is not None and record.engine == "customop"
    assert [n.placement for n in record.nodes] == ["dml", "dml", "dml"]


def _shape_gather_model() -> onnx.ModelProto:
    # Shape -> Gather -> Reshape (a shape computation: onnxruntime's DirectML provider runs that Gather on
    # the CPU) beside a Gather of float data (runs on DirectML).
    return make_model(
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "zero"], ["b"], name="batch_dim", axis=0),
            helper.make_node("Concat", ["b", "minus_one"], ["new_shape"], name="concat", axis=0),
            helper.make_node("Reshape", ["x", "new_shape"], ["flat"], name="reshape"),
            helper.make_node("Gather", ["flat", "i"], ["y"], name="rows", axis=1),
        ],
        {"x": (TensorProto.FLOAT, [3, 4, 5]), "i": (TensorProto.INT64, [2])},
        ["y"],
        initializers={"zero": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)},
    )


def test_shape_computation_stays_with_onnxruntime_as_in_the_partitioned_engine() -> None:
    from dmlshim import InferenceSession

    model = _shape_gather_model()
    feeds = {"x": special_floats(np.random.default_rng(1), (3, 4, 5)), "i": np.array([19, -20], np.int64)}
    eng = engine(model)
    got, record = run_all(eng, model, feeds)
    assert_bitwise(got, ort_run(model, feeds))
    by_name = {n.name: n for n in record.nodes}
    assert by_name["rows"].placement == "dml"
    kept = by_name["batch_dim"]
    assert kept.placement == "onnxruntime-cpu" and kept.ort_placement == "CPUExecutionProvider"
    assert kept.reasons[-1][0] == "ort_cpu_preferred"
    # The default engine records the same node the same way.
    partitioned = InferenceSession(model, engine="partitioned")
    partitioned.run(None, feeds)
    default = {n.name: n for n in partitioned.last_run_record.nodes}["batch_dim"]
    assert (default.placement, default.reasons, default.ort_placement) == (
        kept.placement,
        kept.reasons,
        kept.ort_placement,
    )
    # ort_cpu_preference=False lowers it too.
    every = engine(model, ort_cpu_preference=False)
    got, record = run_all(every, model, feeds)
    assert_bitwise(got, ort_run(model, feeds))
    assert {n.name: n.placement for n in record.nodes} == {"batch_dim": "dml", "rows": "dml"}
