"""The fast paths of translation and execution give exactly what the general paths give.

* ``validate`` accepts a descriptor through a message-free pass (``fast_accept.accepted``) and only
  otherwise runs the rule checks: on mutated descriptors both must agree at every feature level.
* ``min_feature_level`` is computed on first read: it must equal the lowest level at which the node
  translates, found by translating at every level; copies and pickles keep it.
* ``translate_model`` reads types lazily (``_GraphInfos``): the same TensorInfo as ``tensor_infos``.
* The kernels remember per descriptor object which structural checks passed (``per_object``): a failing
  check is never remembered, and the binding names are checked on every call.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from dmlshim.dml import BufferTensorDesc, DataType, FeatureLevel, OperatorDesc, TensorFlags
from dmlshim.dml import validate as dml_validate
from dmlshim.dml.fast_accept import accepted
from dmlshim.dml.rule_checks import find_violations
from dmlshim.errors import IndexOutOfRangeError, InvalidDescriptorError
from dmlshim.kernels import KernelOptions, execute
from dmlshim.kernels import common as kernel_common
from dmlshim.translate import (
    TensorInfo,
    infer_shapes,
    model_translation,
    translate_model,
    translate_node,
    translator,
)
from dmlshim.translate.plan import InputBinding, NodeTranslation, assemble
from dmlshim.translate.shapes_info import tensor_infos

FL = FeatureLevel
F, I64 = TensorProto.FLOAT, TensorProto.INT64
MODELS = Path(__file__).resolve().parent.parent / "onnx_models"

# (op, attributes, [(shape, elem type) of each input])
NODES: list[tuple[str, dict[str, int], list[tuple[tuple[int, ...], int]]]] = [
    ("Gather", {"axis": 0}, [((5, 4), F), ((3,), I64)]),
    ("Gather", {"axis": 1}, [((2, 5, 4), I64), ((2, 3), I64)]),
    ("GatherElements", {"axis": 1}, [((3, 5), F), ((3, 2), I64)]),
    ("GatherElements", {"axis": 0}, [((6, 5), F), ((2, 3), I64)]),
    ("GatherND", {"batch_dims": 1}, [((2, 3, 4), F), ((2, 5, 1), I64)]),
    ("GatherND", {}, [((3, 4, 2, 2, 2, 2), I64), ((2, 2), I64)]),
    ("ScatterElements", {"axis": 1}, [((3, 5), F), ((3, 2), I64), ((3, 2), F)]),
    ("ScatterND", {}, [((6, 4), F), ((2, 1), I64), ((2, 4), F)]),
    ("ScatterND", {}, [((4, 4, 2), I64), ((3, 2), I64), ((3, 2), I64)]),
]


def _node(op: str, attrs: dict[str, int], count: int) -> onnx.NodeProto:
    return helper.make_node(op, [f"in{i}" for i in range(count)], ["out"], name=f"{op}_node", **attrs)


def _translate(index: int, fl: FeatureLevel) -> NodeTranslation:
    op, attrs, inputs = NODES[index]
    infos = [TensorInfo(shape, elem) for shape, elem in inputs]
    return translate_node(_node(op, attrs, len(inputs)), 18, infos, fl)


def _valid_descriptors() -> list[OperatorDesc]:
    out = []
    for index in range(len(NODES)):
        for fl in (FL.FL_2_1, FL.FL_3_0, FL.FL_5_0):
            t = _translate(index, fl)
            if t.operator is not None:
                out.append(t.operator)
    return out


DESCRIPTORS = _valid_descriptors()
LEVELS = sorted(FeatureLevel)

_SIZES = (0, 1, 2, 3, 7, 2**32 - 1, 2**32)
_DATA_TYPES = [d for d in DataType if d not in (DataType.UINT4, DataType.INT4)]


@st.composite
def mutated(draw: st.DrawFn) -> OperatorDesc:
    """A descriptor of DESCRIPTORS with up to three fields changed, valid or not."""
    desc = draw(st.sampled_from(DESCRIPTORS))
    for _ in range(draw(st.integers(0, 3))):
        tensors = desc.tensors()
        uints = desc.uints()
        if uints and draw(st.booleans()):
            name = draw(st.sampled_from(sorted(uints)))
            uints[name] = draw(st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 8, 9]))
        else:
            name = draw(st.sampled_from(sorted(tensors)))
            t = tensors[name]
            sizes, strides, total = list(t.sizes), t.strides, -1
            kind = draw(st.sampled_from(["size", "rank", "strides", "type", "flags", "total", "align"]))
            data_type, flags, alignment = t.data_type, int(t.flags), t.guaranteed_base_offset_alignment
            if kind == "size":
                sizes[draw(st.integers(0, len(sizes) - 1))] = draw(st.sampled_from(_SIZES))
            elif kind == "rank":
                sizes = [1, *sizes] if draw(st.booleans()) or len(sizes) == 1 else sizes[1:]
                strides = None
            elif kind == "strides":
                length = draw(st.sampled_from([len(sizes), len(sizes), len(sizes) - 1]))
                strides = (
                    tuple(
                        draw(
                            st.lists(st.sampled_from([0, 1, 3, 40, 2**33]), min_size=length, max_size=length)
                        )
                    )
                    if length
                    else None
                )
            elif kind == "type":
                data_type = draw(st.sampled_from(_DATA_TYPES))
            elif kind == "flags":
                flags = draw(st.sampled_from([0, 1, 2, 3]))
            elif kind == "total":
                total = max(0, t.total_tensor_size_in_bytes + draw(st.sampled_from([-4, 4, 2**64])))
            else:
                alignment = draw(st.sampled_from([0, 8, 16, 24, 256, 2**33]))
            tensors[name] = BufferTensorDesc(
                data_type, tuple(sizes), strides, TensorFlags(flags) if flags < 2 else flags, total, alignment
            )
        desc = type(desc).from_fields(tensors, uints)
    return desc


@settings(max_examples=600, deadline=None, derandomize=True)
@given(mutated())
def test_accepting_pass_agrees_with_the_rule_checks(desc: OperatorDesc) -> None:
    for fl in LEVELS:
        full = find_violations(desc, fl)
        assert accepted(desc, fl) == (not full), (fl, full)
        assert dml_validate.validate(desc, fl) == full


def test_valid_descriptors_take_the_accepting_pass() -> None:
    # Otherwise the agreement above would only cover rejections.
    assert all(accepted(d, FL.FL_5_0) for d in DESCRIPTORS)


def test_translated_tensors_equal_constructed_ones() -> None:
    for desc in DESCRIPTORS:
        for tensor in desc.tensors().values():
            assert tensor == BufferTensorDesc(tensor.data_type, tensor.sizes, tensor.strides)


@pytest.mark.parametrize("index", range(len(NODES)))
@pytest.mark.parametrize("fl", [FL.FL_1_0, FL.FL_2_1, FL.FL_3_0, FL.FL_5_0])
def test_min_feature_level_is_the_lowest_level_that_translates(index: int, fl: FeatureLevel) -> None:
    translator._translate.cache_clear()
    t = _translate(index, fl)
    lowest = next((level for level in LEVELS if _translate(index, level).ok), None)
    assert t.min_feature_level == lowest


def test_min_feature_level_is_deferred_and_survives_copies() -> None:
    translator._translate.cache_clear()
    t = _translate(0, FL.FL_5_0)
    assert type(t.__dict__["_min_feature_level"]) is translator.Deferred
    for other in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), dataclasses.replace(t, name="x")):
        assert other.min_feature_level == FL.FL_1_0
    assert t == pickle.loads(pickle.dumps(t))
    assert hash(t) == hash(copy.deepcopy(t))
    assert t.to_json()["min_feature_level"] == "DML_FEATURE_LEVEL_1_0"


def test_assemble_is_the_constructor() -> None:
    t = _translate(3, FL.FL_5_0)
    binding = t.inputs[0]
    fields = {f.name: getattr(binding, f.name) for f in dataclasses.fields(binding)}
    assert assemble(InputBinding, **fields) == InputBinding(**fields)
    del fields["window"]
    with pytest.raises(TypeError, match="window"):
        assemble(InputBinding, **fields)


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.onnx")), ids=lambda p: p.stem)
def test_lazy_graph_infos_equal_tensor_infos(path: Path) -> None:
    def check(graph: onnx.GraphProto, scope: dict[str, TensorInfo]) -> None:
        lazy = model_translation._GraphInfos(graph, scope)
        eager = dict(scope)
        eager.update(tensor_infos(graph))
        assert dict(lazy) == eager
        assert all(lazy.get(name) == info for name, info in eager.items())
        assert lazy.get("no such value") is None
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    check(sub, eager)

    check(infer_shapes(onnx.load(path)).graph, {})


def test_value_infos_override_inputs_only_when_typed() -> None:
    x = helper.make_tensor_value_info("x", F, [4, 3])
    untyped = onnx.ValueInfoProto(name="x")
    y = helper.make_tensor_value_info("y", F, [2, 3])
    idx = helper.make_tensor("idx", I64, [2], [0, 1])
    node = helper.make_node("Gather", ["x", "idx"], ["y"])
    graph = helper.make_graph([node], "g", [x], [y], initializer=[idx], value_info=[untyped])
    infos = model_translation._GraphInfos(graph, {})
    assert infos["x"] == TensorInfo((4, 3), F)
    assert infos["idx"] == TensorInfo((2,), I64)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert translate_model(model).nodes[0].ok


def test_kernel_checks_are_remembered_per_descriptor_and_failures_are_not() -> None:
    t = _translate(0, FL.FL_5_0)
    desc = t.operator
    assert desc is not None
    data = np.arange(20, dtype=np.float32).reshape(desc.input_tensor.sizes)
    indices = np.array([4, 0, 1], dtype=np.int64).reshape(desc.indices_tensor.sizes)
    bound = {"InputTensor": data, "IndicesTensor": indices}
    first = execute(desc, bound).output
    np.testing.assert_array_equal(execute(desc, bound).output, first)
    # Binding names and index values are still checked on every call.
    with pytest.raises(InvalidDescriptorError, match="unknown binding"):
        execute(desc, {**bound, "Bogus": indices})
    with pytest.raises(InvalidDescriptorError, match="not bound"):
        execute(desc, {"InputTensor": data})
    with pytest.raises(IndexOutOfRangeError, match=r"out of range|outside"):
        execute(desc, {**bound, "IndicesTensor": indices + 10})
    clamped = execute(desc, {**bound, "IndicesTensor": indices + 10}, KernelOptions(index_mode="clamp"))
    assert clamped.output.shape == first.shape
    # A descriptor whose checks fail raises on every call.
    broken = dataclasses.replace(desc, output_tensor=desc.output_tensor.with_sizes((1, 9)))
    for _ in range(2):
        with pytest.raises(InvalidDescriptorError):
            execute(broken, bound)


def test_per_object_forgets_dead_objects() -> None:
    calls: list[int] = []

    class Thing:
        pass

    @kernel_common.per_object
    def compute(obj: Thing) -> int:
        calls.append(1)
        return len(calls)

    a = Thing()
    assert compute(a) == compute(a) == 1
    del a
    gc.collect()
    assert compute._entries == {}
    b = Thing()
    assert compute(b) == 2
