"""Hostile round 55 (issue 35): a hostile user against dmlshim's safety promises, each case kept, the
ones that held and the ones fixed (the summary, export and file cases are in
tests/test_hostile55_files.py).

Fixed:

- A ``Pad`` whose ``pads`` are fed (or computed from the feeds), a ``Resize`` or ``Upsample`` whose
  ``sizes`` or ``scales`` are, a ``CenterCropPad`` whose ``shape`` is and a ``HannWindow`` (Hamming,
  Blackman) whose ``size`` is were never sized from the run's feeds: under
  ``DMLSHIM_MEMORY_LIMIT=100000000`` every engine let onnxruntime allocate a fed ``[0, 0, 20000, 20000]``
  pad of a 1x1 value (1675 MB peak), as the docs promised only for Expand/Tile/ConstantOfShape/Range/
  OneHot. Now sized as those are (``execute/plan/grown_sizes.py``), exactly as onnxruntime computes the
  shape: each case below runs at a limit of exactly onnxruntime's output bytes and is refused one byte
  under it.
- ``python -m dmlshim.ort --summary-file opt.onnx --overwrite`` of a program whose session writes
  ``optimized_model_filepath = "opt.onnx"``: the summary replaced the program's optimized model at exit
  (dmlshim had written it for the program, and a file this process placed was never a newcomer); now only
  a file placed as the same kind of output counts as dmlshim's own (``fileio/files.py``).
- ``export -o link --overwrite`` (``StagedFolder`` over a symbolic link): a regular file the user put in
  the link's place during the export was removed by the commit's ``os.unlink`` (another link was
  replaced); now anything but the link that was checked is refused and kept (``fileio/folders.py``). A
  listed node folder of a previous export made a link meanwhile had the files of the link's target
  removed (``iterdir`` follows links); every listed entry is checked again before any is removed.
- ``InferenceSession(proto)`` of an ``onnx.ModelProto`` kept the caller's object: editing it afterwards
  (weights zeroed in place, a node removed) changed the partitioned engine's runs at once and every
  engine's ``set_providers``; the session now copies it (``execute/weights/model_source.py``).
- A ``Gather`` whose indices (or data) such a node makes, a ``Tile`` by fed repeats or an ``Expand`` to
  a shape computed from the feeds, was not sized from that node's shape: the cpu and custom-op engines
  ran a 400 MB gather by 100,000 tiled indices under a 100 MB limit (512 and 967 MB peak), the
  partitioned engine refused it only after its whole-model check had allocated it (516 MB peak); now
  refused before any engine runs, at 114-122 MB (``execute/plan/fed_sizes.py``), in the steady lane too.

Held (kept): a fed Pad inside the If branch a run takes; a Clip bound replaced by ``add_initializer``
(the non-negativity proof proves nothing from it, every run equals onnxruntime's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError

from .computed_sizes_child import gives_onnxruntimes_values, run_case

ENGINES = ("partitioned", "customop", "cpu")
V = helper.make_tensor_value_info


def _model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 18) -> bytes:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "h55", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model.SerializeToString()


def _reference(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _engine(engine: str) -> dict:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    return {"engine": engine}


def _sized_model(kind: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """``big = OP(x, fed shape-like input)`` read by an emulated Gather; ``big`` is an output too."""
    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    inits: list = []
    opset = 18
    if kind == "upsample":
        opset = 9
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("scales", TensorProto.FLOAT, [2])]
        feeds = {"x": x, "scales": np.array([1.7, 2.3], np.float32)}
        node = helper.make_node("Upsample", ["x", "scales"], ["big"], name="grow")
    elif kind == "center_crop_pad":  # crops the first axis to 3, pads the last to 12
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("shape", TensorProto.INT64, [2])]
        feeds = {"x": x, "shape": np.array([3, 12], np.int64)}
        node = helper.make_node("CenterCropPad", ["x", "shape"], ["big"], name="grow", axes=[0, 1])
    elif kind == "hann_window":
        inputs = [V("size", TensorProto.INT64, [])]
        feeds = {"size": np.array(13, np.int64)}
        node = helper.make_node(
            "HannWindow", ["size"], ["big"], name="grow", output_datatype=TensorProto.DOUBLE
        )
    elif kind == "mel_weight_matrix":
        inputs = [V("bins", TensorProto.INT64, []), V("dft", TensorProto.INT64, [])]
        feeds = {"bins": np.array(6, np.int64), "dft": np.array(33, np.int64)}
        names = ["bins", "dft", "rate", "low", "high"]
        node = helper.make_node(
            "MelWeightMatrix", names, ["big"], name="grow", output_datatype=TensorProto.DOUBLE
        )
        inits = [
            numpy_helper.from_array(np.array(16000, np.int64), "rate"),
            numpy_helper.from_array(np.array(0.0, np.float32), "low"),
            numpy_helper.from_array(np.array(4000.0, np.float32), "high"),
        ]
    elif kind.startswith("pad"):
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("pads", TensorProto.INT64, [None])]
        names = ["x", "pads"]
        feeds = {"x": x, "pads": np.array([1, -2, 3, 4], np.int64)}
        if kind == "pad_axes":
            names += ["", "axes"]
            inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes")]
            feeds["pads"] = np.array([-3, 9], np.int64)
        node = helper.make_node("Pad", names, ["big"], name="grow", mode="edge")
    elif kind == "resize_sizes":
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("sizes", TensorProto.INT64, [2])]
        feeds = {"x": x, "sizes": np.array([9, 3], np.int64)}
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["big"], name="grow", mode="nearest")
    elif kind == "resize_scales":
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("scales", TensorProto.FLOAT, [2])]
        # 1.7 * 5 = 8.5 and 2.3 * 7 = 16.1 in float32: onnxruntime truncates to [8, 16]
        feeds = {"x": x, "scales": np.array([1.7, 2.3], np.float32)}
        node = helper.make_node("Resize", ["x", "", "scales"], ["big"], name="grow", mode="nearest")
    else:  # resize_axes: sizes for the last axis only (axes=[-1] crashes onnxruntime 1.24.4 itself)
        inputs = [V("x", TensorProto.FLOAT, [5, 7]), V("sizes", TensorProto.INT64, [1])]
        feeds = {"x": x, "sizes": np.array([11], np.int64)}
        node = helper.make_node(
            "Resize", ["x", "", "", "sizes"], ["big"], name="grow", mode="nearest", axes=[1]
        )
    nodes = [node, helper.make_node("Gather", ["big", "i"], ["y"], axis=0, name="gather")]
    inputs.append(V("i", TensorProto.INT64, [2]))
    feeds["i"] = np.array([0, -1], np.int64)
    elem = TensorProto.DOUBLE if kind in ("hann_window", "mel_weight_matrix") else TensorProto.FLOAT
    outputs = [V("y", elem, None), V("big", elem, None)]
    return _model(nodes, inputs, outputs, inits, opset), feeds


@pytest.mark.parametrize(
    "kind",
    [
        "pad",
        "pad_axes",
        "resize_sizes",
        "resize_scales",
        "resize_axes",
        "upsample",
        "center_crop_pad",
        "hann_window",
        "mel_weight_matrix",
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_fed_pad_or_resize_is_sized_exactly_as_onnxruntime_allocates(
    engine: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, feeds = _sized_model(kind)
    want = _reference(model, feeds)
    exact = want[1].nbytes
    session = dmlshim.InferenceSession(model, **_engine(engine))
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(exact))
    for got, expected in zip(session.run(None, feeds), want, strict=True):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(exact - 1))
    with pytest.raises(TooLargeError) as caught:
        session.run(None, feeds)
    message = str(caught.value)
    assert "'grow'" in message and "'big'" in message and str(list(want[1].shape)) in message


@pytest.mark.parametrize("kind", ["pad", "resize"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_huge_fed_pad_or_resize_is_refused_before_onnxruntime_allocates_it(
    engine: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1x1 value padded (resized) to 20001x20001 floats by a fed input: 1.6 GB; refused at a 10 MB limit
    (before: 1675 MB peak under a 100 MB limit). The pads here are computed from the feed
    (``Mul(pads, two)``), as the sizes of a fed Resize are given."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "10000000")
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two")]
    if kind == "pad":
        nodes = [
            helper.make_node("Mul", ["half", "two"], ["pads"]),
            helper.make_node("Pad", ["x", "pads"], ["big"], name="grow"),
        ]
        shape_input = V("half", TensorProto.INT64, [4])
        small, huge = np.array([0, 0, 1, 1], np.int64), np.array([0, 0, 10000, 10000], np.int64)
    else:
        nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["big"], name="grow")]
        shape_input = V("sizes", TensorProto.INT64, [2])
        small, huge = np.array([3, 3], np.int64), np.array([20001, 20001], np.int64)
    nodes.append(helper.make_node("Gather", ["big", "i"], ["y"], axis=0, name="gather"))
    inputs = [V("x", TensorProto.FLOAT, [1, 1]), shape_input, V("i", TensorProto.INT64, [1])]
    model = _model(nodes, inputs, [V("y", TensorProto.FLOAT, None)], inits)
    feeds = {"x": np.ones((1, 1), np.float32), shape_input.name: small, "i": np.array([1], np.int64)}
    session = dmlshim.InferenceSession(model, **_engine(engine))
    np.testing.assert_array_equal(session.run(None, feeds)[0], _reference(model, feeds)[0])
    with pytest.raises(TooLargeError, match=r"node 'grow'.*op (Pad|Resize)"):
        session.run(None, {**feeds, shape_input.name: huge})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fed_pad_inside_the_branch_a_run_takes_is_sized(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``If(c)`` whose then-branch pads ``x`` by the outer feed ``pads``: refused when the run takes that
    branch with a huge pad, onnxruntime's values when it takes the other one."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "10000000")
    then = helper.make_graph(
        [
            helper.make_node("Pad", ["x", "pads"], ["big"], name="grow"),
            helper.make_node("ReduceSum", ["big"], ["o"], keepdims=0),
        ],
        "then",
        [],
        [V("o", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["o2"], keepdims=0)],
        "else",
        [],
        [V("o2", TensorProto.FLOAT, None)],
    )
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
        [V("x", TensorProto.FLOAT, [1, 1]), V("pads", TensorProto.INT64, [4]), V("c", TensorProto.BOOL, [])],
        [V("y", TensorProto.FLOAT, None)],
    )
    huge = {"x": np.ones((1, 1), np.float32), "pads": np.array([0, 0, 2000, 2000], np.int64)}
    session = dmlshim.InferenceSession(model, **_engine(engine))
    with pytest.raises(TooLargeError, match=r"\[2001, 2001\]"):
        session.run(None, {**huge, "c": np.array(True)})
    skipped = {**huge, "c": np.array(False)}
    np.testing.assert_array_equal(session.run(None, skipped)[0], _reference(model, skipped)[0])


def _gather_by_made_indices(how: str) -> tuple[bytes, str]:
    """``y = ReduceSum(Gather(table, idx))``, a 100x1000 float table, ``idx`` made from the feeds by a node
    sized from fed values: a Tile by fed repeats, or an Expand to ``Shape(x) * 100``. Returns the model
    and the name of the feed that sets the size."""
    if how == "tile":
        nodes = [helper.make_node("Tile", ["i", "reps"], ["idx"], name="tile")]
        inputs = [V("i", TensorProto.INT64, [1]), V("reps", TensorProto.INT64, [1])]
        sizing = "reps"
    elif how == "tile_cast_add":  # shape-keeping steps between the Tile and the gather
        nodes = [
            helper.make_node("Tile", ["i", "reps"], ["t"], name="tile"),
            helper.make_node("Cast", ["t"], ["t32"], to=TensorProto.INT32),
            helper.make_node("Add", ["t32", "one"], ["idx"]),
        ]
        inputs = [V("i", TensorProto.INT64, [1]), V("reps", TensorProto.INT64, [1])]
        sizing = "reps"
    elif how == "range_mod":  # Range(0, Shape(x)[0] * 100, 1) % 100, as a position index is written
        nodes = [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n0"], axis=0),
            helper.make_node("Mul", ["n0", "hundred"], ["n"]),
            helper.make_node("Range", ["zero", "n", "one64"], ["r"], name="range"),
            helper.make_node("Mod", ["r", "hundred"], ["idx"]),
        ]
        inputs = [V("i", TensorProto.INT64, [1]), V("x", TensorProto.FLOAT, [None])]
        sizing = "x"
    else:
        nodes = [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Mul", ["s", "k"], ["s2"]),
            helper.make_node("Expand", ["i", "s2"], ["idx"], name="expand"),
        ]
        inputs = [V("i", TensorProto.INT64, [1]), V("x", TensorProto.FLOAT, [None])]
        sizing = "x"
    nodes += [
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0, name="gather"),
        helper.make_node("ReduceSum", ["g"], ["y"], keepdims=0),
    ]
    table = np.arange(100 * 1000, dtype=np.float32).reshape(100, 1000) % 7
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([100], np.int64), "k"),
        numpy_helper.from_array(np.array(1, np.int32), "one"),
        numpy_helper.from_array(np.array(1, np.int64), "one64"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(100, np.int64), "hundred"),
    ]
    return _model(nodes, inputs, [V("y", TensorProto.FLOAT, None)], inits, 17), sizing


@pytest.mark.parametrize("how", ["tile", "expand", "tile_cast_add", "range_mod"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_gather_by_indices_a_fed_value_sizes_is_refused_before_onnxruntime_allocates_it(
    engine: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Tile (Expand) itself is small: 4000 int64 indices are 32 KB; the gather's output is 16 MB.
    Before: the cpu and custom-op engines ran it under the limit (400 MB by 100,000 indices under a
    100 MB limit: 512 and 967 MB peak), the partitioned engine refused it after its whole-model check
    had allocated it (516 MB peak); now every engine refuses it before any engine runs (114 to 122 MB
    peak, imports included). A run within the limit gives onnxruntime's values, also after the
    session's steady runs (the same feed shapes, another repeat count)."""
    model, sizing = _gather_by_made_indices(how)
    i = np.array([3], np.int64)

    def feeds(count: int) -> dict[str, np.ndarray]:
        if sizing == "reps":
            return {"i": i, "reps": np.array([count], np.int64)}
        return {"i": i, "x": np.zeros(count // 100, np.float32)}

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "10000000")
    session = dmlshim.InferenceSession(model, **_engine(engine))
    for _ in range(5):  # past the first runs: the steady lane answers runs of the same shapes
        small = feeds(200)
        np.testing.assert_array_equal(session.run(None, small)[0], _reference(model, small)[0])
    with pytest.raises(TooLargeError) as caught:
        session.run(None, feeds(4000))
    message = str(caught.value)
    assert "'gather'" in message and "[4000, 1000]" in message
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(4000 * 1000 * 4))
    big = feeds(4000)
    np.testing.assert_array_equal(session.run(None, big)[0], _reference(model, big)[0])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["tile", "expand", "pad", "resize"])
@pytest.mark.parametrize("engine", ENGINES)
def test_peak_memory_stays_under_the_limit_when_refused(engine: str, case: str, tmp_path: Path) -> None:
    """In a child under a 100 MB limit: a 400 MB gather by 100,000 made indices, a 1x1 value padded
    (resized) to 20001x20001 (20000x20000) floats by a fed n. Refused, naming the node, at a peak well
    under the 400 MB (1.6 GB) value; before: 512-967 MB and 1675 MB peak (the partitioned engine
    refused the gather only after its whole-model check had allocated it)."""
    _engine(engine)
    n = 100_000 if case in ("tile", "expand") else 20_000
    out = run_case("hostile55_models", case, engine, n, tmp_path / "out.npy", "100000000")
    assert "REFUSED TooLargeError" in out, out
    assert ("gather Gather" if case in ("tile", "expand") else "grow") in out, out
    peak = int(out.split("PEAK_MB")[1].split()[0])
    assert peak < 300, out
    gives_onnxruntimes_values("hostile55_models", case, engine, tmp_path / "small.npy", "100000000")


@pytest.mark.parametrize("level", ["2_1", "5_0"])
def test_a_clip_bound_replaced_by_add_initializer_proves_nothing(level: str) -> None:
    """Held: ``Clip(k, lo)`` with ``lo = 0`` in the model (no graph input) but ``-5`` given by
    ``SessionOptions.add_initializer``, which onnxruntime uses: negative indices reach the gather, whose
    output must still be onnxruntime's (and DirectML's) on every run, the proved runs included."""
    nodes = [
        helper.make_node("Clip", ["k", "lo"], ["idx"], name="clip"),
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    inputs = [V("x", TensorProto.FLOAT, ["N", 8]), V("k", TensorProto.INT64, [None])]
    model = _model(nodes, inputs, [V("y", TensorProto.FLOAT, None)], [_scalar("lo", 0)], 17)
    low = np.array(-5, np.int64)
    value = onnxruntime.OrtValue.ortvalue_from_numpy(low)

    def options() -> onnxruntime.SessionOptions:
        made = onnxruntime.SessionOptions()
        made.intra_op_num_threads = 1
        made.add_initializer("lo", value)
        return made

    oracle = onnxruntime.InferenceSession(model, options(), providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model, options(), feature_level=level)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    for k in [np.array([0, 1, 2])] * 5 + [np.array([-1, 0, 1]), np.array([-3] * 100)]:
        feeds = {"x": x, "k": k}
        np.testing.assert_array_equal(session.run(None, feeds)[0], oracle.run(None, feeds)[0])


def _providers(engine: str) -> list[str]:
    """The providers ``set_providers`` takes for a session of ``engine`` (the engine built again)."""
    return ["CPUExecutionProvider"] if engine == "cpu" else ["DmlExecutionProvider", "CPUExecutionProvider"]


def _scalar(name: str, value: int) -> TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)
