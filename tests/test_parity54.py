"""Issue 35's last parity gaps (helper left54): dmlshim accepts exactly what onnxruntime accepts and refuses
the rest with onnxruntime's class, in every engine, the drop-in and the CLI. Every expectation is computed
from the installed onnxruntime in the test (1.32 and 1.24.4 alike):

1. ``session.disable_cpu_ep_fallback = 1``: ``Fail`` for a node left on the CPU, ``InvalidArgument`` when
   the CPU provider is named, a session when no node is left (was ``InvalidArgument`` always);
2. strings whose bytes are no UTF-8 in an initializer or a Constant: the session builds, and a run whose
   output holds one is onnxruntime's ``UnicodeDecodeError`` (was ``BadInputError``, and a crash for a
   Constant);
3. an external-data ``location`` holding a NUL is read up to it, with onnxruntime's folder rules on the rest
   (was refused);
4. a model path given as text that is no UTF-8 is onnxruntime's ``TypeError`` (dmlshim opened it);
5. Ctrl-C sent to ``validate --jobs 2`` alone (not its process group) ends it as the group's does.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.fuzz_settings import assert_cli_error, run_cli
from tests.oracle import IR_VERSION

CPU = "CPUExecutionProvider"
ENGINES: dict[str, dict[str, Any]] = {
    "partitioned": {},
    "cpu": {"engine": "cpu"},
    "customop": {"engine": "customop"},
}
REPO = Path(__file__).resolve().parents[1]


def _engine(name: str) -> dict[str, Any]:
    if name == "customop":
        pytest.importorskip("onnxruntime_extensions")
    return ENGINES[name]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _gather_model(w: onnx.TensorProto | None = None) -> onnx.ModelProto:
    """``y = Gather(w, x)`` over a 6x2 float initializer (or ``w`` as given)."""
    if w is None:
        w = helper.make_tensor("w", TensorProto.FLOAT, [6, 2], np.arange(12, dtype=np.float32))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "x"], ["y"], name="g")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _outcome(build: Any, feeds: dict[str, Any]) -> tuple[str, Any]:
    """("ok", outputs) or ("error", the exception) of building a session and running it once."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unavailable provider named: both warn
            return "ok", build().run(None, feeds)
    except Exception as exc:  # whichever class: compared with onnxruntime's below
        return "error", exc


def _same_outcome(theirs: tuple[str, Any], ours: tuple[str, Any]) -> None:
    """dmlshim answered as onnxruntime: the same values, or an error of onnxruntime's class whose text
    begins with onnxruntime's words."""
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "ok":
        for want, got in zip(theirs[1], ours[1], strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
        return
    want_exc, got_exc = theirs[1], ours[1]
    assert isinstance(got_exc, type(want_exc)), (type(got_exc).__mro__, want_exc)
    first = str(want_exc).strip().splitlines()[0]
    assert str(got_exc).startswith(first[:120]), (str(got_exc), first)


# 1. session.disable_cpu_ep_fallback ----------------------------------------------------------------------


def _fallback_models() -> dict[str, tuple[onnx.ModelProto, dict[str, Any]]]:
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    nodeless = helper.make_graph(
        [], "z", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])], [w]
    )
    folded = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"]), helper.make_node("Add", ["w", "w"], ["y2"])],
        "f",
        [],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2]),
        ],
        [w],
    )
    opsets = [helper.make_opsetid("", 17)]
    return {
        "nodes": (_gather_model(), {"x": np.array([0, 1, 5], np.int64)}),
        "nodeless": (helper.make_model(nodeless, opset_imports=opsets, ir_version=IR_VERSION), {}),
        "all_folded": (helper.make_model(folded, opset_imports=opsets, ir_version=IR_VERSION), {}),
    }


def _no_fallback(level: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if level == "disable_all":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


PROVIDERS = {
    "default": None,
    "cpu": [CPU],
    "dml": ["DmlExecutionProvider"],
    "dml_cpu": ["DmlExecutionProvider", CPU],
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("level", ["default", "disable_all"])
@pytest.mark.parametrize("providers", sorted(PROVIDERS))
@pytest.mark.parametrize("kind", sorted(_fallback_models()))
def test_disabled_cpu_fallback_answers_as_onnxruntime(
    tmp_path: Path, kind: str, providers: str, level: str, engine: str
) -> None:
    model, feeds = _fallback_models()[kind]
    path = str(_save(model, tmp_path / "m.onnx"))
    chosen = PROVIDERS[providers]
    if engine == "customop" and chosen is not None and "DmlExecutionProvider" not in chosen:
        pytest.skip("engine='customop' emulates DirectML: providers without it are dmlshim's own usage error")
    extra = {} if chosen is None else {"providers": chosen}
    theirs = _outcome(lambda: ort.InferenceSession(path, _no_fallback(level), **extra), feeds)
    ours = _outcome(
        lambda: dmlshim.InferenceSession(path, _no_fallback(level), **extra, **_engine(engine)), feeds
    )
    _same_outcome(theirs, ours)


def test_disabled_cpu_fallback_leaves_the_options_as_they_were(tmp_path: Path) -> None:
    path = str(_save(_gather_model(), tmp_path / "m.onnx"))
    so = _no_fallback("default")
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / "prof")
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):
        dmlshim.InferenceSession(path, so)
    assert so.enable_profiling and so.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    assert not list(tmp_path.glob("prof*"))  # onnxruntime's verdict wrote no profile


# 2. strings that are no UTF-8 -----------------------------------------------------------------------------


def _bad_strings(form: str) -> onnx.ModelProto:
    """``y = Gather(s, x)`` over strings ``[b"ab", b"\\xff\\xfe", b"c"]``: an initializer, a Constant, or a
    Constant that reaches the Gather across an emulated float Gather (a partition boundary)."""
    s = onnx.TensorProto(name="s", data_type=TensorProto.STRING, dims=[3])
    s.string_data.extend([b"ab", b"\xff\xfe", b"c"])
    inputs = [helper.make_tensor_value_info("x", TensorProto.INT64, [2])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.STRING, [2])]
    if form == "initializer":
        nodes, inits = [helper.make_node("Gather", ["s", "x"], ["y"])], [s]
    elif form == "constant":
        nodes, inits = (
            [helper.make_node("Constant", [], ["s"], value=s), helper.make_node("Gather", ["s", "x"], ["y"])],
            [],
        )
    else:
        nodes = [
            helper.make_node("Constant", [], ["s"], value=s),
            helper.make_node("Identity", ["s"], ["s2"]),
            helper.make_node("Gather", ["f", "i"], ["g"], name="emulated"),
            helper.make_node("Size", ["g"], ["n"]),
            helper.make_node("Mul", ["n", "zero"], ["n0"]),
            helper.make_node("Add", ["x", "n0"], ["idx"]),
            helper.make_node("Gather", ["s2", "idx"], ["y"]),
        ]
        inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0])]
        inputs += [
            helper.make_tensor_value_info("f", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ]
        outputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph(nodes, "strings", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _string_feeds(form: str, picked: list[int]) -> dict[str, np.ndarray]:
    feeds = {"x": np.array(picked, np.int64)}
    if form == "across_partitions":
        feeds |= {"f": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([3, 0], np.int64)}
    return feeds


def _profiled(tmp_path: Path) -> ort.SessionOptions:
    """Options under which the default engine runs partition by partition (no whole-model check)."""
    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / "prof")
    return so


@pytest.mark.parametrize("engine", [*sorted(ENGINES), "partitioned_profiled"])
@pytest.mark.parametrize("picked", [[0, 2], [1, 2]], ids=["utf8_picked", "bad_bytes_picked"])
@pytest.mark.parametrize("form", ["initializer", "constant", "across_partitions"])
def test_strings_that_are_no_utf8_as_onnxruntime(
    tmp_path: Path, form: str, picked: list[int], engine: str
) -> None:
    path = str(_save(_bad_strings(form), tmp_path / "m.onnx"))
    feeds = _string_feeds(form, picked)
    theirs = _outcome(lambda: ort.InferenceSession(path, providers=[CPU]), feeds)
    if engine == "partitioned_profiled":
        ours_session = lambda: dmlshim.InferenceSession(path, _profiled(tmp_path))  # noqa: E731
    else:
        ours_session = lambda: dmlshim.InferenceSession(path, **_engine(engine))  # noqa: E731
    for _ in range(3):  # later runs take other paths (run plans, the lean check)
        _same_outcome(theirs, _outcome(ours_session, feeds))


def test_run_with_ort_values_returns_the_undecodable_strings(tmp_path: Path) -> None:
    path = str(_save(_bad_strings("across_partitions"), tmp_path / "m.onnx"))
    feeds = {
        k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in _string_feeds("across_partitions", [1, 2]).items()
    }
    for session in (
        ort.InferenceSession(path, providers=[CPU]),
        dmlshim.InferenceSession(path, _profiled(tmp_path)),
    ):
        value = session.run_with_ort_values(None, feeds)[0]
        assert value.data_type() == "tensor(string)" and value.shape() == [2]
        with pytest.raises(UnicodeDecodeError):
            value.numpy()


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("form", ["initializer", "constant", "across_partitions"])
def test_cli_strings_that_are_no_utf8(tmp_path: Path, form: str, command: str) -> None:
    path = _save(_bad_strings(form), tmp_path / "m.onnx")
    for picked in ([0, 2], [1, 2]):
        np.savez(tmp_path / "in.npz", **_string_feeds(form, picked))
        try:
            want = ort.InferenceSession(str(path), providers=[CPU]).run(None, _string_feeds(form, picked))
        except UnicodeDecodeError as exc:
            r = run_cli(command, path, "--inputs", tmp_path / "in.npz", "-q")
            assert_cli_error(r.code, r.err, str(exc))
            continue
        out = tmp_path / "out.npz"
        args = ["-o", out, "--overwrite"] if command == "run" else []
        r = run_cli(command, path, "--inputs", tmp_path / "in.npz", "-q", *args)
        assert r.code == 0 and "Traceback" not in r.err, r.err
        if command == "run":
            assert np.load(out)["y"].tolist() == want[0].tolist()
    assert run_cli("inspect", path).code in (0, 1)


def test_validate_of_a_folder_counts_undecodable_output_an_error(tmp_path: Path) -> None:
    _save(_bad_strings("constant"), tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", x=np.array([1, 2], np.int64))  # the inputs beside the model
    r = run_cli("validate", tmp_path, "-q")
    assert r.code == 2 and "1 error, 0 crash" in r.out + r.err, r.out + r.err


# 3. an external-data location holding a NUL -----------------------------------------------------------------

LOCATIONS = {
    "tail": "w.bin\x00junk",
    "tail_escaping": "w.bin\x00/../../outside.bin",
    "escape_before": "../outside.bin\x00",
    "empty_cut": "\x00w.bin",
    "absolute": "{abs}\x00",
    "sub_folder": "sub/w.bin\x00x",
    "folder_cut": "sub\x00/w.bin",
    "missing_cut": "missing\x00w.bin",
}


def _external_at(tmp_path: Path, location: str) -> Path:
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    np.arange(12, dtype=np.float32).tofile(folder / "w.bin")
    np.arange(100, 112, dtype=np.float32).tofile(folder / "sub" / "w.bin")
    np.arange(200, 212, dtype=np.float32).tofile(tmp_path / "outside.bin")
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[6, 2])
    w.data_location = TensorProto.EXTERNAL
    location = location.replace("{abs}", str(folder / "w.bin"))
    for key, value in (("location", location), ("offset", "0"), ("length", "48")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    return _save(_gather_model(w), folder / "m.onnx")


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("case", sorted(LOCATIONS))
def test_external_location_with_nul_read_as_onnxruntime(tmp_path: Path, case: str, engine: str) -> None:
    path = str(_external_at(tmp_path, LOCATIONS[case]))
    feeds = {"x": np.array([0, 1, 5], np.int64)}
    theirs = _outcome(lambda: ort.InferenceSession(path, providers=[CPU]), feeds)
    ours = _outcome(lambda: dmlshim.InferenceSession(path, **_engine(engine)), feeds)
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "ok":
        _same_outcome(theirs, ours)
    else:  # onnxruntime's class; its words name the cut name (dmlshim's own where it checks first)
        assert isinstance(ours[1], type(theirs[1])), (ours[1], theirs[1])


@pytest.mark.parametrize("command", ["run", "validate", "inspect"])
@pytest.mark.parametrize("case", ["tail", "escape_before"])
def test_cli_external_location_with_nul(tmp_path: Path, case: str, command: str) -> None:
    path = _external_at(tmp_path, LOCATIONS[case])
    np.savez(tmp_path / "in.npz", x=np.array([0, 1, 5], np.int64))
    extra = [] if command == "inspect" else ["--inputs", tmp_path / "in.npz"]
    r = run_cli(command, path, *extra, "-q")
    try:
        ort.InferenceSession(str(path), providers=[CPU])
    except ort.capi.onnxruntime_pybind11_state.Fail:
        assert_cli_error(r.code, r.err, "escapes model directory")
    else:
        assert r.code == 0 and "Traceback" not in r.err, r.err


def test_the_cut_data_file_is_an_input_never_replaced(tmp_path: Path) -> None:
    path = _external_at(tmp_path, LOCATIONS["tail"])
    data = path.parent / "w.bin"
    before = data.read_bytes()
    np.savez(tmp_path / "in.npz", x=np.array([0, 1, 5], np.int64))
    r = run_cli("run", path, "--inputs", tmp_path / "in.npz", "-o", data, "--overwrite", "-q")
    assert_cli_error(r.code, r.err, "refusing to replace an input")
    assert data.read_bytes() == before


# 4. a model path that is no UTF-8 -------------------------------------------------------------------------


class _Named:
    def __init__(self, name: str | bytes) -> None:
        self.name = name

    def __fspath__(self) -> str | bytes:
        return self.name


def _undecodable(tmp_path: Path) -> bytes:
    name = os.fsencode(str(tmp_path)) + b"/m\xff.onnx"
    with open(name, "wb") as handle:
        handle.write(_gather_model().SerializeToString())
    return name


SOURCES = {
    "str": lambda b: os.fsdecode(b),
    "pathlib": lambda b: Path(os.fsdecode(b)),
    "pathlike_str": lambda b: _Named(os.fsdecode(b)),
    "pathlike_bytes": lambda b: _Named(b),
    "str_with_nul": lambda b: os.fsdecode(b) + "\x00tail",
    "missing_str": lambda b: os.fsdecode(b + b".absent"),
    "bytes": lambda b: b,  # plain bytes are a serialized model to both
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_model_path_that_is_no_utf8_as_onnxruntime(tmp_path: Path, source: str, engine: str) -> None:
    given = SOURCES[source](_undecodable(tmp_path))
    feeds = {"x": np.array([0, 1, 5], np.int64)}
    theirs = _outcome(lambda: ort.InferenceSession(given, providers=[CPU]), feeds)
    ours = _outcome(lambda: dmlshim.InferenceSession(given, **_engine(engine)), feeds)
    if isinstance(theirs[1], TypeError):  # pybind11's words, which name onnxruntime's own signature
        assert isinstance(ours[1], TypeError) and str(ours[1]).startswith(str(theirs[1]).split(" The ")[0])
    else:
        _same_outcome(theirs, ours)


@pytest.mark.parametrize("command", ["run", "validate", "inspect", "export", "lower"])
def test_cli_model_path_that_is_no_utf8(tmp_path: Path, command: str) -> None:
    name = os.fsdecode(_undecodable(tmp_path))
    with pytest.raises(TypeError):
        ort.InferenceSession(name, providers=[CPU])
    extra = ["-o", tmp_path / "out"] if command in ("export", "lower") else []
    r = run_cli(command, name, *extra, "-q")
    assert_cli_error(r.code, r.err, "not valid UTF-8")
    assert not (tmp_path / "out").exists()


def test_validate_of_a_folder_reports_the_undecodable_name(tmp_path: Path) -> None:
    _undecodable(tmp_path)
    _save(_gather_model(), tmp_path / "ok.onnx")
    r = run_cli("validate", tmp_path, "-q")
    text = r.out + r.err
    assert r.code == 2 and "1 match" in text and "1 error, 0 crash" in text and "not valid UTF-8" in text, (
        text
    )
