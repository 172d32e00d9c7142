"""Hostile cases for the values inspect folds to learn static shapes (issue 35: memory and time bounded by
the model, ``DMLSHIM_MEMORY_LIMIT`` honoured, no traceback), against onnxruntime itself.

Every model computes a ``Resize``'s sizes from the static input shape through float arithmetic (onnx's
data propagation cannot), so inspect computes folded values with onnx's reference evaluator, as
onnxruntime's inference learns them after folding; a hostile folded node sits alongside. The removed set
must be onnxruntime CPU's (:func:`dmlshim.directml.optimized_away.optimized_away_nodes`); peak memory and
time are measured in child processes, time against onnxruntime's own session creation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.directml.optimized_away import optimized_away_nodes
from dmlshim.translate.model_translation import translate_model
from dmlshim.translate.ort_folding import OPTIMIZED_AWAY_CODE


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], outputs: list[tuple[str, int]]
) -> onnx.ModelProto:
    """x[1,3,8,8] resized to sizes Floor(Cast(Shape(x)) * [1,1,2,2]); the Gather of the resized shape is
    removed by onnxruntime once it folds the sizes; ``nodes`` alongside, each of their ``outputs``
    flattened and concatenated with a graph input (a node that stays reads it, so its value may matter)."""
    base = [
        helper.make_node("Shape", ["x"], ["sx"], name="shape_x"),
        helper.make_node("Cast", ["sx"], ["sxf"], to=T.FLOAT, name="cast_sx"),
        helper.make_node("Mul", ["sxf", "scale2f"], ["sizesf"], name="mul_sizes"),
        helper.make_node("Floor", ["sizesf"], ["sizesfl"], name="floor_sizes"),
        helper.make_node("Cast", ["sizesfl"], ["sizes"], to=T.INT64, name="cast_sizes"),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], name="resize", mode="nearest"),
        helper.make_node("Shape", ["r"], ["sr"], name="shape_r"),
        helper.make_node("Gather", ["sr", "two_i"], ["h"], name="gather_h"),
        helper.make_node("Cast", ["h"], ["hf"], to=T.FLOAT, name="cast_h"),
        helper.make_node("Add", ["r", "hf"], ["y"], name="add_y"),
    ]
    base_inits = [
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scale2f"),
        numpy_helper.from_array(np.array(2, np.int64), "two_i"),
    ]
    base_inits.append(numpy_helper.from_array(np.array([-1], np.int64), "minus1"))
    kept = []
    for n, _ in outputs:
        kept.append(helper.make_node("Reshape", [n, "minus1"], [f"{n}_flat"], name=f"{n}_reshape"))
        kept.append(
            helper.make_node("Concat", [f"{n}_flat", f"{n}_dyn"], [f"{n}_out"], name=f"{n}_concat", axis=0)
        )
    graph = helper.make_graph(
        base + nodes + kept,
        "hostile",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])]
        + [helper.make_tensor_value_info(f"{n}_dyn", t, [1]) for n, t in outputs],
        [helper.make_tensor_value_info("y", T.FLOAT, None)]
        + [helper.make_tensor_value_info(f"{n}_out", t, None) for n, t in outputs],
        base_inits + inits,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])


def _inspect_removed(model: onnx.ModelProto) -> set[str]:
    translation = translate_model(model, other_domains=True, optimized=True)
    return {n.name for n in translation.nodes if any(r.code == OPTIMIZED_AWAY_CODE for r in n.reasons)}


def _oracle_or_skip(model: onnx.ModelProto) -> set[str]:
    """onnxruntime's removed set; skipped where onnxruntime refuses the session (before 1.32 a kernel that
    fails at constant folding fails session creation, with nothing removed to compare)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own refusal: its message says why
        _inspect_removed(model)  # inspect still answers, no traceback
        pytest.skip(f"onnxruntime {ort.__version__} refuses the session: {str(exc)[:120]}")
    return set(optimized_away_nodes(model, "all"))


_CHILD = r"""
import json, sys, time
import onnx
import onnxruntime as ort
from dmlshim.translate.model_translation import translate_model

def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024

if sys.argv[2] == "ort":
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    start = time.perf_counter()
    ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
else:
    model = onnx.load(sys.argv[1], load_external_data=False)
    translate_model(model, other_domains=True, optimized=False)  # warm: imports, caches
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak restarts from here
    except OSError:
        pass
    start = time.perf_counter()
    before = status("VmRSS")
    translate_model(model, other_domains=True, optimized=True)
grew = status("VmHWM") - (0 if sys.argv[2] == "ort" else before)
print(json.dumps({"seconds": time.perf_counter() - start, "grew": grew}))
"""


def _measure(path: Path, who: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """Seconds and peak growth in bytes of inspect's translation (``who="inspect"``) or of onnxruntime's
    session creation (``"ort"``), in a child process."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), who],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def test_a_folded_string_value_is_not_computed_under_the_memory_limit(tmp_path: Path) -> None:
    """A Tile of a 100 kB string constant 1000 times (100 MB of strings, one element each): onnxruntime
    folds it at session creation; inspect took 490 MB more while folding under a 100 MB
    ``DMLSHIM_MEMORY_LIMIT`` (a 1 MB string: 35 s and 9.6 GB) since it counted elements, not bytes."""
    model = _model(
        [helper.make_node("Tile", ["s", "reps"], ["st"], name="tile_s")],
        [
            numpy_helper.from_array(np.array(["x" * 100_000], dtype=object), "s"),
            numpy_helper.from_array(np.array([1000], np.int64), "reps"),
        ],
        [("st", T.STRING)],
    )
    path = _save(model, tmp_path / "strings.onnx")
    limit = 100_000_000
    grew = _measure(path, "inspect", {"DMLSHIM_MEMORY_LIMIT": str(limit)})["grew"]
    assert grew < limit // 2, grew
    assert _inspect_removed(model) == _oracle_or_skip(model)  # 1.24 fails to fold a string constant


def test_a_folded_op_slow_in_the_reference_evaluator_is_not_computed(tmp_path: Path) -> None:
    """A MaxPool of a 1x4x256x256 initializer (onnxruntime folds it in milliseconds; onnx's reference
    evaluator loops in Python: inspect took 2.5 s, 350x onnxruntime's session creation)."""
    rng = np.random.default_rng(0)
    model = _model(
        [helper.make_node("MaxPool", ["pi"], ["po"], name="pool", kernel_shape=[5, 5], pads=[2, 2, 2, 2])],
        [numpy_helper.from_array(rng.random((1, 4, 256, 256), np.float32), "pi")],
        [("po", T.FLOAT)],
    )
    path = _save(model, tmp_path / "pool.onnx")
    ours = _measure(path, "inspect")["seconds"]
    theirs = _measure(path, "ort")["seconds"]
    assert ours < 2 * theirs + 0.5, (ours, theirs)
    assert _inspect_removed(model) == set(optimized_away_nodes(model, "all", path))


@pytest.mark.parametrize("op", ["ConstantOfShape", "Resize"])
def test_one_large_folded_value_does_not_stop_the_others(tmp_path: Path, op: str) -> None:
    """Folded values beyond the bound alongside (three ConstantOfShape of 2^20 floats; a linear Resize of
    an initializer to 2^20 floats): the sizes of the Resize are still computed, and the Gather of its
    shape is removed, as onnxruntime removes it (inspect computed nothing when the total passed the
    bound, and kept it)."""
    if op == "ConstantOfShape":
        nodes = [
            helper.make_node(
                "ConstantOfShape", ["cs"], [f"c{i}"], value=numpy_helper.from_array(np.array([i], np.float32))
            )
            for i in range(3)
        ]
        inits = [numpy_helper.from_array(np.array([1 << 20], np.int64), "cs")]
        outs = [(f"c{i}", T.FLOAT) for i in range(3)]
    else:
        nodes = [helper.make_node("Resize", ["ri", "", "rsc"], ["ro"], name="resize_w", mode="linear")]
        inits = [
            numpy_helper.from_array(np.ones((1, 1, 256, 256), np.float32), "ri"),
            numpy_helper.from_array(np.array([1, 1, 4, 4], np.float32), "rsc"),
        ]
        outs = [("ro", T.FLOAT)]
    model = _model(nodes, inits, outs)
    path = _save(model, tmp_path / "large.onnx")
    theirs = set(optimized_away_nodes(model, "all", path))
    assert "gather_h" in theirs
    assert _inspect_removed(model) == theirs


def test_no_numpy_warning_from_folding() -> None:
    """A folded division by zero (Range to inf) prints no RuntimeWarning of onnx's reference evaluator."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s0"], name="shape0"),
        helper.make_node("Gather", ["s0", "zi"], ["d0"], name="gather0"),
        helper.make_node("Cast", ["d0"], ["d0f"], to=T.FLOAT, name="castd0"),
        helper.make_node("Div", ["d0f", "den"], ["lim"], name="div"),
        helper.make_node("Range", ["zf", "lim", "delta"], ["rr"], name="range"),
        helper.make_node("Shape", ["rr"], ["srr"], name="shape_rr"),
        helper.make_node("Gather", ["srr", "zi"], ["g_rr"], name="gather_rr"),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zi"),
        numpy_helper.from_array(np.array(0.0, np.float32), "den"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zf"),
        numpy_helper.from_array(np.array(1.0, np.float32), "delta"),
    ]
    model = _model(nodes, inits, [("rr", T.FLOAT), ("g_rr", T.INT64)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _inspect_removed(model)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w) for w in caught]
    assert ours == set(optimized_away_nodes(model, "all"))


@pytest.mark.parametrize(
    ("op", "index", "axis"),
    [
        ("Gather", 5, 1),
        ("Gather", -4, 1),
        ("Gather", 2, 1),
        ("GatherElements", 3, 1),
        ("GatherElements", 1, 0),
    ],
)
def test_a_constant_gather_out_of_range_is_not_folded(op: str, index: int, axis: int) -> None:
    """A Gather of constants with an index out of range: onnxruntime's kernel fails at constant folding, so
    the node stays (inspect said removed); in range it is removed. The other folds go on."""
    indices = np.array([index], np.int64) if op == "Gather" else np.full((1, 3), index, np.int64)
    model = _model(
        [helper.make_node(op, ["c6", "idx"], ["go"], name="gather_c", axis=axis)],
        [
            numpy_helper.from_array(np.arange(6, dtype=np.int64).reshape(2, 3), "c6"),
            numpy_helper.from_array(indices, "idx"),
        ],
        [("go", T.INT64)],
    )
    theirs = _oracle_or_skip(model)
    assert "gather_h" in theirs
    assert _inspect_removed(model) == theirs


def test_a_node_the_reference_evaluator_fails_on_does_not_stop_the_others() -> None:
    """A folded Reshape of 6 elements to [5] beside the Resize sizes: onnx's reference evaluator fails on
    it; the sizes are still computed and the Gather of the resized shape removed, as onnxruntime does."""
    model = _model(
        [helper.make_node("Reshape", ["c6", "five"], ["go"], name="reshape_bad")],
        [
            numpy_helper.from_array(np.arange(6, dtype=np.int64).reshape(2, 3), "c6"),
            numpy_helper.from_array(np.array([5], np.int64), "five"),
        ],
        [("go", T.INT64)],
    )
    theirs = _oracle_or_skip(model)
    assert "gather_h" in theirs
    assert _inspect_removed(model) == theirs


@pytest.mark.parametrize(("to", "dtype"), [(T.FLOAT16, np.float16), (T.FLOAT, np.float32)])
def test_sizes_computed_in_a_type_onnxruntime_cpu_cannot_fold(to: int, dtype: type) -> None:
    """The Resize sizes computed in float16 (Floor has no float16 kernel in onnxruntime CPU): its constant
    folding leaves them, the resized shape stays unknown and the Gather of it stays; inspect
    computed them with onnx's reference evaluator and said removed. In float32 it is removed."""
    model = _model([], [], [])
    nodes = model.graph.node
    for node in nodes:
        if node.name == "cast_sx":
            node.attribute[0].i = to
    scale = next(t for t in model.graph.initializer if t.name == "scale2f")
    scale.CopyFrom(numpy_helper.from_array(np.array([1, 1, 2, 2], dtype), "scale2f"))
    theirs = _oracle_or_skip(model)
    assert ("gather_h" in theirs) is (to == T.FLOAT)
    assert _inspect_removed(model) == theirs


_HALF_OPS = [
    ("Floor", []), ("Add", ["c2"]), ("Sqrt", []), ("Where", ["cond", "c2"]), ("Tile", ["shape11"]),
    ("Expand", ["shape11"]), ("Max", ["c2"]), ("Transpose", []), ("Concat", ["c2"]),
]  # fmt: skip


@pytest.mark.parametrize("elem", [T.FLOAT16, T.BFLOAT16])
@pytest.mark.parametrize(("op", "extra"), _HALF_OPS, ids=[op for op, _ in _HALF_OPS])
def test_a_16_bit_float_op_without_a_cpu_kernel_is_not_folded(op: str, extra: list[str], elem: int) -> None:
    """An index computed from a 16-bit float constant: onnxruntime CPU folds only the ops it has a kernel
    of that type for (data movement, a few more for float16), so the Gather reading the index is removed
    only then; inspect folded every op of constant inputs and said removed."""
    inits = [
        helper.make_tensor("c", elem, [1, 1], [1.0]),
        helper.make_tensor("c2", elem, [1, 1], [1.0]),
        numpy_helper.from_array(np.array([[True]]), "cond"),
        numpy_helper.from_array(np.array([1, 1], np.int64), "shape11"),
        numpy_helper.from_array(np.array([-1], np.int64), "m1"),
        numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "d"),
    ]
    ins = ["cond", "c", "c2"] if op == "Where" else ["c", *extra]
    attrs = {"axis": 0} if op == "Concat" else {}
    nodes = [
        helper.make_node(op, ins, ["f"], name="op", **attrs),
        helper.make_node("Cast", ["f"], ["fi"], to=T.INT64, name="cast"),
        helper.make_node("Reshape", ["fi", "m1"], ["idx"], name="flat"),
        helper.make_node("Gather", ["d", "idx"], ["g"], name="gather_const", axis=0),
        helper.make_node("Add", ["g", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 18)])
    assert _inspect_removed(model) == _oracle_or_skip(model)
