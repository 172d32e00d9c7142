"""The per-shape run plans: ``run_translation`` compiles what depends only on a translation (shapes,
dtypes, bindings) once per translation object, and the kernels keep their structural checks per
descriptor (``kernels.common.derived``). Value-dependent checks must still run on every call.

Expected values come from onnxruntime's CPU provider (``tests.oracle``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from dmlshim.dml import DataType, FeatureLevel
from dmlshim.errors import BadInputError, IndexOutOfRangeError, InvalidDescriptorError
from dmlshim.kernels import KernelOptions, execute
from dmlshim.kernels import common as kernel_common
from dmlshim.translate import TensorInfo, run_translation, translate_node
from dmlshim.translate.plan import elem_type_of
from dmlshim.translate.runner import run_plan
from tests.oracle import make_node_model, ort_run


def _translate(op: str, arrays: list[np.ndarray], level: FeatureLevel = FeatureLevel.FL_5_0, **attrs: int):
    names = ["data", "indices", "updates"][: len(arrays)]
    node = helper.make_node(op, names, ["output"], name="n0", **attrs)
    infos = [TensorInfo(tuple(a.shape), elem_type_of(a.dtype)) for a in arrays]
    return translate_node(node, 13, infos, level, name="n0")


def _expected(op: str, arrays: list[np.ndarray], **attrs: int) -> np.ndarray:
    names = ["data", "indices", "updates"][: len(arrays)]
    model = make_node_model(op, dict(zip(names, arrays, strict=False)), attrs)
    return ort_run(model, dict(zip(names, arrays, strict=False)))[0]


def test_plan_is_compiled_once_per_translation_and_anew_for_new_shapes() -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((6, 4)).astype(np.float32)
    first = _translate("Gather", [data, np.array([1, 5], np.int64)], axis=0)
    assert run_plan(first) is run_plan(first)
    for idx in (np.array([1, 5], np.int64), np.array([0, 3], np.int64)):
        got = run_translation(first, [data, idx]).output
        np.testing.assert_array_equal(got, _expected("Gather", [data, idx], axis=0))
    # New shapes: a new translation, whose plan is its own.
    idx3 = np.array([[2, 0, 4]], np.int64)
    second = _translate("Gather", [data, idx3], axis=0)
    assert run_plan(second) is not run_plan(first)
    assert run_plan(second).inputs[1][2] == (1, 3)
    np.testing.assert_array_equal(
        run_translation(second, [data, idx3]).output, _expected("Gather", [data, idx3], axis=0)
    )


def test_plan_still_rejects_inputs_of_other_shapes_and_types() -> None:
    data = np.arange(24, dtype=np.float32).reshape(6, 4)
    t = _translate("Gather", [data, np.array([1, 2], np.int64)], axis=0)
    run_translation(t, [data, np.array([1, 2], np.int64)])  # the plan is now cached
    with pytest.raises(BadInputError, match=r"float32\[6, 4\]"):
        run_translation(t, [data[:5], np.array([1, 2], np.int64)])
    with pytest.raises(BadInputError, match=r"int64\[2\]"):
        run_translation(t, [data, np.array([1, 2], np.int32)])


def test_non_contiguous_inputs_match_onnxruntime_through_the_plan() -> None:
    data = np.arange(48, dtype=np.float32).reshape(6, 8)[:, ::2]
    idx = np.array([[3, 0], [1, 1]], np.int64)[:, ::1]
    t = _translate("Gather", [np.ascontiguousarray(data), idx], axis=0)
    got = run_translation(t, [data, idx]).output
    np.testing.assert_array_equal(got, _expected("Gather", [np.ascontiguousarray(data), idx], axis=0))


@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"])
def test_out_of_range_raises_the_same_error_on_every_call(op: str) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    good = {
        "Gather": [np.array([0, 2], np.int64)],
        "GatherElements": [np.array([[0, 1, 2, 0]], np.int64)],
        "GatherND": [np.array([[2], [0]], np.int64)],
        "ScatterElements": [np.array([[0, 1, 2, 0]], np.int64), np.ones((1, 4), np.float32)],
        "ScatterND": [np.array([[2], [0]], np.int64), np.ones((2, 4), np.float32)],
    }[op]
    t = _translate(op, [data, *good])
    np.testing.assert_array_equal(run_translation(t, [data, *good]).output, _expected(op, [data, *good]))
    bad_idx = good[0].copy()
    bad_idx.flat[1] = 7
    messages = []
    for _ in range(2):
        with pytest.raises(IndexOutOfRangeError) as info:
            run_translation(t, [data, bad_idx, *good[1:]])
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "7" in messages[0] and "n0" in messages[0]


def test_negative_indices_follow_the_feature_level_on_every_call() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([0, 1], np.int64)
    neg = np.array([-1, 0], np.int64)
    new = _translate("Gather", [data, idx], FeatureLevel.FL_5_0, axis=0)
    run_translation(new, [data, idx])
    np.testing.assert_array_equal(run_translation(new, [data, neg]).output, _expected("Gather", [data, neg]))
    # Below FL_3_0 the translation wraps negative indices on the host (a value-dependent step that the
    # plan leaves to every call), and the kernel itself refuses them.
    old = _translate("Gather", [data, idx], FeatureLevel.FL_2_1, axis=0)
    assert old.operator is not None
    assert run_plan(old).inputs[1][4] is None
    run_translation(old, [data, idx])
    np.testing.assert_array_equal(run_translation(old, [data, neg]).output, _expected("Gather", [data, neg]))
    # The kernel on its own, with signed INT32 indices (the type negatives need from FL_3_0 on).
    indices = dataclasses.replace(old.operator.indices_tensor, data_type=DataType.INT32)
    old_desc = dataclasses.replace(old.operator, indices_tensor=indices)
    inputs = {
        "InputTensor": data.reshape(old.operator.input_tensor.sizes),
        "IndicesTensor": neg.astype(np.int32).reshape(indices.sizes),
    }
    for _ in range(2):
        with pytest.raises(IndexOutOfRangeError, match="negative"):
            execute(old_desc, inputs, KernelOptions(feature_level=FeatureLevel.FL_2_1))


def test_duplicates_are_counted_on_every_call() -> None:
    data = np.zeros((4, 3), np.float32)
    unique = np.array([[0], [2]], np.int64)
    twice = np.array([[1], [1]], np.int64)
    updates = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    t = _translate("ScatterND", [data, unique, updates])
    assert run_translation(t, [data, unique, updates]).duplicate_indices == 0
    result = run_translation(t, [data, twice, updates])
    assert result.duplicate_indices == 1
    # onnxruntime's single-threaded ScatterND applies the updates in order: the last one wins.
    np.testing.assert_array_equal(result.output, _expected("ScatterND", [data, twice, updates]))
    assert run_translation(t, [data, unique, updates]).duplicate_indices == 0


def test_kernel_layout_is_derived_once_and_a_bad_descriptor_raises_every_time() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([2, 0], np.int64)
    t = _translate("Gather", [data, idx], axis=0)
    desc = t.operator
    assert desc is not None
    inputs = {
        "InputTensor": data.reshape(desc.input_tensor.sizes),
        "IndicesTensor": idx.reshape(desc.indices_tensor.sizes),
    }
    calls = []

    def layout(d):
        calls.append(d)
        return "layout"

    assert kernel_common.derived(desc, layout) == "layout"
    assert kernel_common.derived(desc, layout) == "layout"
    assert len(calls) == 1
    execute(desc, inputs, KernelOptions())
    bad = dataclasses.replace(desc, axis=5)
    messages = []
    for _ in range(2):
        with pytest.raises(InvalidDescriptorError) as info:
            execute(bad, inputs, KernelOptions())
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "Axis 5" in messages[0]


def test_bool_data_goes_through_the_plan_and_matches_onnxruntime() -> None:
    data = np.array([[True, False, True], [False, False, True]])
    idx = np.array([[[1, 2], [0, 0]], [[0, 1], [1, 0]]], np.int64)
    t = _translate("GatherND", [data, idx])
    plan = run_plan(t)
    assert plan.inputs[0][4] is not None and plan.inputs[0][5]  # bool viewed as UINT8, no bind_input
    for _ in range(2):
        got = run_translation(t, [data, idx]).output
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, _expected("GatherND", [data, idx]))
