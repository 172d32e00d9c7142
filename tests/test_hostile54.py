"""Held-out hostile round 54 (issue 35, "a held-out round ... finds no silent wrong value, no destroyed
file, no crash"): the cases that failed, each kept as a minimal repro.

- ``Range(0, n, 1)`` with only its limit ``n`` fed (its start and step constants, as every exporter writes
  it) was never sized from the feed: under ``DMLSHIM_MEMORY_LIMIT`` every engine let onnxruntime allocate
  it (a 400 MB int64 ``Range`` under a 100 MB limit ran at 480 MB peak, 7.2 GB for a 1.6 GB one with the
  custom-op engine), although docs/safety.md promises fed bounds are sized before any engine runs. Only a
  ``Range`` all of whose bounds were fed or computed was sized.
- The steady lane (a run repeating an accepted run's dtypes and shapes) skipped that check altogether: a
  fed scalar bound changes the size without changing any feed's shape, so after the warm-up runs a large
  bound ran unchecked (and a partitioned session with nothing to emulate never checked it at all).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError

LIMIT = 10_000_000
BIG = 5_000_000  # an int64 Range of 40 MB: past the 10 MB limit, harmless if a regression allocates it
ENGINES = ("partitioned", "customop", "cpu")


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _range_model(*, with_gather: bool) -> bytes:
    """``z = ReduceSum(Range(0, n, 1))`` (start and step initializers), optionally beside an emulated
    Gather ``y = Gather(d, i)``."""
    V = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("ReduceSum", ["r"], ["z"], keepdims=0),
    ]
    inputs = [V("n", TensorProto.INT64, [])]
    outputs = [V("z", TensorProto.INT64, None)]
    if with_gather:
        nodes.insert(0, helper.make_node("Gather", ["d", "i"], ["y"], axis=0))
        inputs += [V("d", TensorProto.FLOAT, [4, 3]), V("i", TensorProto.INT64, [2])]
        outputs.insert(0, V("y", TensorProto.FLOAT, None))
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    return _model(nodes, inputs, outputs, inits)


def _feeds(n: int, *, with_gather: bool) -> dict[str, np.ndarray]:
    feeds = {"n": np.array(n, np.int64)}
    if with_gather:
        feeds["d"] = np.arange(12, dtype=np.float32).reshape(4, 3)
        feeds["i"] = np.array([1, -1], np.int64)
    return feeds


def _reference(model: bytes | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("with_gather", [False, True], ids=["range_alone", "beside_a_gather"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_range_with_constant_start_and_step_is_sized_from_its_fed_limit(
    engine: str, with_gather: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    model = _range_model(with_gather=with_gather)
    session = dmlshim.InferenceSession(model, engine=engine)
    small = _feeds(5, with_gather=with_gather)
    for got, want in zip(session.run(None, small), _reference(model, small), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TooLargeError) as caught:
        session.run(None, _feeds(BIG, with_gather=with_gather))
    message = str(caught.value)
    assert "Range" in message and "'r'" in message and str(BIG) in message


@pytest.mark.parametrize("engine", ENGINES)
def test_a_float_range_is_sized_from_its_fed_limit(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Range(0.0, n, 1.0)`` in float32 with ``n`` fed: only integer bounds were read, so a float Range
    ran unchecked (200 MB under a 100 MB limit: 289 MB peak)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    V = helper.make_tensor_value_info
    model = _model(
        [
            helper.make_node("Range", ["start", "n", "step"], ["r"]),
            helper.make_node("ReduceSum", ["r"], ["z"], keepdims=0),
        ],
        [V("n", TensorProto.FLOAT, [])],
        [V("z", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "start"),
            numpy_helper.from_array(np.array(1.0, np.float32), "step"),
        ],
    )
    session = dmlshim.InferenceSession(model, engine=engine)
    small = {"n": np.array(5.25, np.float32)}
    np.testing.assert_array_equal(session.run(None, small)[0], _reference(model, small)[0])  # 0.5 .. 4.5
    with pytest.raises(TooLargeError, match="Range"):
        session.run(None, {"n": np.array(float(BIG), np.float32)})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_range_whose_start_is_an_overridable_default_is_sized(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Range(s, n, 1)`` with ``s`` an initializer listed as a graph input (a default the run may feed
    over) and only ``n`` fed: the default was never read, so the Range ran unchecked."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    V = helper.make_tensor_value_info
    model = _model(
        [
            helper.make_node("Range", ["s", "n", "one"], ["r"]),
            helper.make_node("ReduceSum", ["r"], ["z"], keepdims=0),
        ],
        [V("n", TensorProto.INT64, []), V("s", TensorProto.INT64, [])],
        [V("z", TensorProto.INT64, None)],
        [
            numpy_helper.from_array(np.array(0, np.int64), "s"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
        ],
    )
    session = dmlshim.InferenceSession(model, engine=engine)
    with pytest.raises(TooLargeError, match="Range"):
        session.run(None, {"n": np.array(BIG, np.int64)})
    near = {"n": np.array(BIG, np.int64), "s": np.array(BIG - 4, np.int64)}  # fed over: 4 elements
    np.testing.assert_array_equal(session.run(None, near)[0], _reference(model, near)[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_steady_lane_still_sizes_a_fed_bound(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bound fed (this form was sized before), warm-up runs at a small bound, then a large one of the
    same shape: the steady lane answered it without the check."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    V = helper.make_tensor_value_info
    model = _model(
        [
            helper.make_node("Gather", ["d", "i"], ["y"], axis=0),
            helper.make_node("Range", ["start", "n", "step"], ["r"]),
            helper.make_node("ReduceSum", ["r"], ["z"], keepdims=0),
        ],
        [V("d", TensorProto.FLOAT, [4, 3]), V("i", TensorProto.INT64, [2])]
        + [V(name, TensorProto.INT64, []) for name in ("start", "n", "step")],
        [V("y", TensorProto.FLOAT, None), V("z", TensorProto.INT64, None)],
        [],
    )

    def feeds(n: int) -> dict[str, np.ndarray]:
        return {
            **_feeds(n, with_gather=True),
            "start": np.array(0, np.int64),
            "step": np.array(1, np.int64),
        }

    session = dmlshim.InferenceSession(model, engine=engine)
    want = _reference(model, feeds(3))
    for _ in range(10):  # past the proved runs and the lean check: the steady lane's shapes
        for got, expected in zip(session.run(None, feeds(3)), want, strict=True):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(TooLargeError):
        session.run(None, feeds(BIG))
    # the session still answers the small bound afterwards
    np.testing.assert_array_equal(session.run(None, feeds(3))[1], want[1])


def test_the_backend_takes_a_numpy_scalar_where_onnxruntimes_backend_does() -> None:
    """onnxruntime 1.32's backend turns a numpy scalar input into a 0-d array (``_normalize_numpy_scalar``),
    1.24's passes it on and its ``run`` refuses it; dmlshim's backend refused it in both."""
    import onnxruntime.backend as ort_backend

    import dmlshim.backend as shim_backend

    V = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT64),
            helper.make_node("Gather", ["d", "c"], ["y"], axis=0),
        ],
        "g",
        [V("x", TensorProto.FLOAT, []), V("d", TensorProto.FLOAT, [3])],
        [V("y", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    inputs = [np.float32(2.5), np.arange(3, dtype=np.float32) + 10]
    try:
        want = ort_backend.prepare(model).run(inputs)
    except Exception:  # onnxruntime 1.24: "Unable to handle object of type"
        with pytest.raises(Exception, match="Unable to handle object"):
            shim_backend.prepare(model).run(inputs)
        return
    got = shim_backend.prepare(model).run(inputs)
    assert len(got) == len(want) == 1
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape == ()
    np.testing.assert_array_equal(got[0], want[0])  # 12.0: row 2


def _real_stack() -> bool:
    from dmlshim.directml.stack import stack_available

    return stack_available()


@pytest.mark.skipif(not _real_stack(), reason="real DirectML stack not set up (`dmlshim directml setup`)")
def test_the_directml_engine_takes_string_feeds_and_outputs() -> None:
    """The Linux host passed numeric tensors only: a model with a tensor(string) input (a string Gather,
    which onnxruntime-directml runs on its CPU provider) failed every run in the directml engine with
    "element type object cannot be passed to onnxruntime-node". onnxruntime-node cuts a string at a NUL,
    so such an element is refused by name rather than run as another string."""
    V = helper.make_tensor_value_info
    model = _model(
        [
            helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
            helper.make_node("Gather", ["f", "i"], ["gf"], axis=0),
        ],
        [V("s", TensorProto.STRING, [4]), V("i", TensorProto.INT64, [3]), V("f", TensorProto.FLOAT, [4])],
        [V("g", TensorProto.STRING, None), V("gf", TensorProto.FLOAT, None)],
        [],
    )
    session = dmlshim.InferenceSession(model, engine="directml")
    for strings in (
        np.array(["a", "", "b", "日本"]),
        np.array([b"x", b"y", b"\xc3\xa9", b""], dtype=object),  # str() of each, as onnxruntime reads it
        np.array(["a", "b\x00c", "\x00", "d"]),  # numpy text: read up to the first NUL, as onnxruntime does
    ):
        feeds = {"s": strings, "i": np.array([3, -1, 0]), "f": np.arange(4, dtype=np.float32)}
        got = session.run(None, feeds)
        want = _reference(model, feeds)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert got[0].dtype == want[0].dtype == np.dtype(object)
    with pytest.raises(dmlshim.DmlShimError, match="NUL character"):
        session.run(
            None,
            {"s": np.array(["a", "b\x00c", "d", "e"], dtype=object), "i": np.array([1, 1, 1])}
            | {"f": np.arange(4, dtype=np.float32)},
        )


def test_replay_does_not_replace_a_users_file_named_like_its_write_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dmlshim.cli.main import main

    model = Path(__file__).parent / "seeds" / "scatter_nd" / "model.json"
    mine = tmp_path / "output.npy"  # the user's own array, named like the seed's writeFile target
    np.save(mine, np.array([42.0]))
    before = mine.read_bytes()
    code = main(["-q", "replay", str(model), "-o", str(tmp_path)])
    capsys.readouterr()
    assert mine.read_bytes() == before
    assert code == 2


def _string_model(tmp_path: Path, *, table: list[str] | None = None) -> tuple[Path, Path]:
    """``g = Gather(s, i)`` on a fed string tensor (or, with ``table``, on a string initializer)."""
    V = helper.make_tensor_value_info
    inputs = [V("i", TensorProto.INT64, [3])]
    inits = []
    if table is None:
        inputs.insert(0, V("s", TensorProto.STRING, [4]))
    else:
        inits.append(helper.make_tensor("s", TensorProto.STRING, [len(table)], [t.encode() for t in table]))
    model = tmp_path / "strings.onnx"
    model.write_bytes(
        _model(
            [helper.make_node("Gather", ["s", "i"], ["g"], axis=0)],
            inputs,
            [V("g", TensorProto.STRING, None)],
            inits,
        )
    )
    feeds = tmp_path / "strings.npz"
    arrays = {"i": np.array([3, -1, 0])}
    if table is None:
        arrays["s"] = np.array(["a", "", "b", "日本"])
    np.savez(feeds, **arrays)
    return model, feeds


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_string_outputs_are_saved_and_compared_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    """``validate --save-outputs`` died with a traceback on any tensor(string) output (numpy: "Object arrays
    cannot be saved when allow_pickle=False"), and ``run -o`` wrote them as numpy text, which ``validate
    --reference-outputs`` then called a dtype MISMATCH against the very strings it wrote."""
    from dmlshim.cli.main import main

    model, feeds = _string_model(tmp_path)
    saved, ran = tmp_path / f"saved{suffix}", tmp_path / f"ran{suffix}"
    assert main(["-q", "validate", str(model), "--inputs", str(feeds), "--save-outputs", str(saved)]) == 0
    assert main(["-q", "run", str(model), "--inputs", str(feeds), "-o", str(ran)]) == 0
    for reference in (saved, ran):
        assert (
            main(
                ["-q", "validate", str(model), "--inputs", str(feeds), "--reference-outputs", str(reference)]
            )
            == 0
        )
    capsys.readouterr()
    if suffix == ".npz":
        want = _reference(
            model.read_bytes(),
            {"s": np.array(["a", "", "b", "日本"], dtype=object), "i": np.array([3, -1, 0])},
        )
        assert np.load(saved)["g"].tolist() == want[0].tolist() == ["日本", "日本", "a"]


def test_a_string_array_ending_in_nul_is_refused_not_a_traceback(tmp_path: Path) -> None:
    """The one writer of ``run -o`` and ``validate --save-*``: a string a numpy text array would cut (a
    trailing NUL) or a Python object that is no string is refused by name, and nothing is written."""
    from dmlshim.errors import BadInputError
    from dmlshim.fileio.array_files import write_arrays

    for values, suffix in ((["a", "b\x00"], ".npz"), (["a", 3], ".json")):
        target = tmp_path / f"o{suffix}"
        with pytest.raises(BadInputError, match="element 1"):
            write_arrays(target, {"g": np.array(values, dtype=object)}, kind="outputs")
        assert not target.exists()


def test_export_writes_a_memory_mapped_weight_without_copying_it(tmp_path: Path) -> None:
    """``dmlshim export`` of a Gather over a 1 GiB external table (sparse file) peaked at 1068 MB of
    anonymous memory under ``DMLSHIM_MEMORY_LIMIT=100000000``: the buffer for ``input.npy`` was
    ``astype``-copied although the memory-mapped weight was already little-endian and contiguous (44 MB
    now; the suite's own DxDispatch rule check reads each written file back, so the peak is not measured
    here: the buffer is checked to be a view of the mapped bytes)."""
    from dmlshim.dxdispatch.values import BufferResource

    mapped_file = tmp_path / "w.bin"
    with open(mapped_file, "wb") as handle:
        handle.truncate(1 << 20)
    mapped = np.memmap(mapped_file, dtype=np.float32, mode="r", shape=(1 << 16, 4))
    values = BufferResource.from_array(mapped, source_path="input.npy").initial_values
    assert np.shares_memory(values.array, mapped)  # a view of the mapped bytes, no copy


def test_the_custom_op_engine_refuses_a_weight_it_would_copy_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Gather of a 1 GiB external table in the custom-op engine peaked at 1073 MB of anonymous memory
    under ``DMLSHIM_MEMORY_LIMIT=100000000`` and ran: onnxruntime-extensions hands each custom-op input to
    Python as a copy, on every run (docs/engines.md). It is refused when the session is built now; the
    partitioned engine, which maps the table, runs it as onnxruntime does (16 MB here, a 10 MB limit)."""
    rows = 1 << 20
    with open(tmp_path / "w.bin", "wb") as handle:
        handle.truncate(rows * 16)
    table = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[rows, 4])
    table.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(rows * 16))):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    V = helper.make_tensor_value_info
    model = tmp_path / "m.onnx"
    model.write_bytes(
        _model(
            [helper.make_node("Gather", ["w", "i"], ["y"], axis=0)],
            [V("i", TensorProto.INT64, [3])],
            [V("y", TensorProto.FLOAT, None)],
            [table],
        )
    )
    feeds = {"i": np.array([1, -1, 7])}
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(LIMIT))
    with pytest.raises(TooLargeError, match="copies it on every run"):
        dmlshim.InferenceSession(str(model), engine="customop")
    got = dmlshim.InferenceSession(str(model)).run(None, feeds)[0]
    monkeypatch.delenv("DMLSHIM_MEMORY_LIMIT")
    np.testing.assert_array_equal(got, _reference(str(model), feeds)[0])


_LEVELS = {
    "disabled": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@pytest.mark.parametrize("level", list(_LEVELS))
def test_profiling_does_not_change_a_models_outputs(tmp_path: Path, level: str) -> None:
    """Profiling on, at every optimization level: onnxruntime's outputs bit for bit (before the fix, at
    extended/all the profiled runs took the partitioned steps: bert_dynamo differed by up to 7.2e-7 on
    onnxruntime 1.32), and the profile still times every emulated node's kernel on every run."""
    model = str(Path(__file__).parents[1] / "onnx_models" / "real" / "bert_dynamo.onnx")
    feeds = dict(np.load(model[: -len(".onnx")] + ".npz"))
    reference_options = onnxruntime.SessionOptions()
    reference_options.intra_op_num_threads = 1
    reference_options.graph_optimization_level = _LEVELS[level]
    reference = onnxruntime.InferenceSession(model, reference_options, providers=["CPUExecutionProvider"])
    want = reference.run(None, feeds)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = _LEVELS[level]
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "p")
    session = dmlshim.InferenceSession(model, options)
    runs = 2
    for _ in range(runs):
        got = session.run(None, feeds)
        for mine, theirs in zip(got, want, strict=True):
            np.testing.assert_array_equal(mine, theirs)
    events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    emulated = session.engine.emulated_nodes  # type: ignore[attr-defined]
    assert emulated
    for name in emulated:
        mine = [e for e in events if e["cat"] == "Node" and e["name"] == f"{name}_kernel_time"]
        assert len(mine) == runs, (name, mine)
        assert all(e["args"]["emulated_by"] == "dmlshim" for e in mine), mine
    assert sum(e["name"] == "model_run" for e in events) == runs
    onnxruntime_nodes = [e for e in events if e["cat"] == "Node" and "emulated_by" not in e["args"]]
    assert onnxruntime_nodes  # onnxruntime's own node events (partitions', or the whole-model check's)


def test_profiled_check_of_a_model_from_bytes_keeps_onnxruntimes_node_events(tmp_path: Path) -> None:
    """A model from bytes with a 1 MiB weight (the check's session is handed it through a fresh copy of
    the options, which must profile too) and a 1 MiB ScatterND (verified, not computed, in the check):
    five profiled runs at onnxruntime's default level give onnxruntime's outputs, and the profile holds
    onnxruntime's events for the other nodes and dmlshim's for each emulated node on every run."""
    n, runs = 512, 5
    rng = np.random.default_rng(54)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
        helper.make_node("ScatterND", ["a", "idx", "upd"], ["b"], name="sc"),
        helper.make_node("Relu", ["b"], ["c"], name="r"),
        helper.make_node("Gather", ["c", "gi"], ["d"], axis=0, name="g"),
        helper.make_node("MatMul", ["d", "w"], ["e"], name="mm2"),
        helper.make_node("Tanh", ["e"], ["f"], name="t"),
        helper.make_node("Gather", ["f", "gj"], ["y"], axis=0, name="g2"),
    ]
    weights = [
        numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([[3], [7]], np.int64), "idx"),
        numpy_helper.from_array(np.ones((2, n), np.float32), "upd"),
        numpy_helper.from_array(np.array([1, 3, 5], np.int64), "gi"),
        numpy_helper.from_array(np.array([0, 2], np.int64), "gj"),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    payload = model.SerializeToString()
    feeds = {"x": rng.standard_normal((n, n)).astype(np.float32)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "p")
    session = dmlshim.InferenceSession(payload, options)
    want = _reference(payload, feeds)
    for _ in range(runs):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])
    assert session.last_run_record is not None and session.last_run_record.path == "whole-model check"
    events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    nodes_seen = [
        (e["name"], e["args"].get("partition"), e["args"]["provider"]) for e in events if e["cat"] == "Node"
    ]
    for name in ("sc", "g", "g2"):
        assert nodes_seen.count((f"{name}_kernel_time", None, "DmlExecutionProvider")) == runs, nodes_seen
    for name in ("mm1", "r", "mm2", "t"):
        assert nodes_seen.count((f"{name}_kernel_time", "whole-model check", "CPUExecutionProvider")) == runs
