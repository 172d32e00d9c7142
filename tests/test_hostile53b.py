"""A hostile user's pass on what changed on 2026-11-30 (issue 35, item 6): NUL characters in paths, the
careful writer's "same bytes" rule, the drop-in worker tally's JSON template, the real-DirectML engine's
optimized-away record, and the whole-model check's copies for heavy runs. Each case asks onnxruntime (CPU)
for what it does, or checks that nothing the user owns is touched."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnxruntime.capi.onnxruntime_pybind11_state import NoSuchFile

import dmlshim
from dmlshim.directml.optimized_away import optimized_away_nodes
from dmlshim.errors import BadInputError
from dmlshim.execute.record import NodeRecord, RunRecord
from dmlshim.fileio import files
from dmlshim.ort import tracking
from tests.oracle import same_bits

from .test_hostile52_files import FEED
from .test_hostile52_files import _model as _inline_model

USERS = "the user's file"

# -- the optimized-away record ------------------------------------------------------------------------


def _shape_gather_model(folded_first: bool) -> onnx.ModelProto:
    """A nameless Gather on the input (onnxruntime keeps it) and a nameless Gather on the Shape of a static
    input (onnxruntime's constant folding removes it), in either order."""
    live = oh.make_node("Gather", ["x", "i1"], ["g_live"], axis=0)
    folded = [
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Gather", ["s", "i0"], ["g_fold"], axis=0),
        oh.make_node("Cast", ["g_fold"], ["gf"], to=TensorProto.FLOAT),
    ]
    nodes = [*folded, live] if folded_first else [live, *folded]
    nodes.append(oh.make_node("Add", ["g_live", "gf"], ["y"]))
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            oh.make_tensor("i0", TensorProto.INT64, [], [0]),
            oh.make_tensor("i1", TensorProto.INT64, [2], [0, 1]),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _ort_kept_outputs(model: onnx.ModelProto, tmp_path: Path) -> set[str]:
    """The outputs of the Gathers onnxruntime CPU keeps at ORT_ENABLE_BASIC (its own optimized graph)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "ort_basic.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(str(tmp_path / "ort_basic.onnx"))
    return {out for node in saved.graph.node if node.op_type == "Gather" for out in node.output}


@pytest.mark.parametrize("folded_first", [False, True], ids=["live-first", "folded-first"])
def test_optimized_away_nameless_nodes_are_found_by_what_survives(folded_first: bool, tmp_path: Path) -> None:
    """A nameless node's reported name is its position (``Gather_3``), which onnxruntime's optimization
    changes: with the folded Gather first, the kept one (``Gather_3``) sat at position 1 of the optimized
    graph, so it was recorded as optimized away (off DirectML) and the folded one (``Gather_1``) as kept.
    Before: {'Gather_3', 'Gather_1'}; now the folded one only, as onnxruntime's optimized graph says."""
    model = _shape_gather_model(folded_first)
    kept = _ort_kept_outputs(model, tmp_path)
    assert kept == {"g_live"}  # onnxruntime's own answer
    names = {
        node.output[0]: f"Gather_{i}" for i, node in enumerate(model.graph.node) if node.op_type == "Gather"
    }
    assert optimized_away_nodes(model, "all") == {names["g_fold"]}


def test_optimized_away_a_kept_node_whose_input_and_output_were_renamed(tmp_path: Path) -> None:
    """A nameless Gather whose index is folded (its input becomes the initializer ``gf``) and whose output
    a removed Identity renames (``y``): onnxruntime keeps it with no name, input or output in common.
    Before, it (``Gather_3``) was recorded as optimized away beside the folded ``Gather_1``; now only the
    folded one is."""
    nodes = [
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Gather", ["s", "i0"], ["gf"], axis=0),
        oh.make_node("Cast", ["gf"], ["c"], to=TensorProto.INT64),
        oh.make_node("Gather", ["x", "c"], ["g"], axis=0),
        oh.make_node("Identity", ["g"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [oh.make_tensor("i0", TensorProto.INT64, [], [0])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    assert _ort_kept_outputs(model, tmp_path) == {"y"}  # one Gather kept, renamed
    assert optimized_away_nodes(model, "all") == {"Gather_1"}


def test_optimized_away_duplicate_names_record_nothing(tmp_path: Path) -> None:
    """Two nodes named alike, one foldable: onnxruntime refuses the model ("two nodes with same node
    name"), so the probe records nothing rather than guess which one is gone."""
    model = _shape_gather_model(True)
    for node in model.graph.node:
        if node.op_type == "Gather":
            node.name = "dup"
    with pytest.raises(Exception, match="same node name"):
        _ort_kept_outputs(model, tmp_path)
    assert optimized_away_nodes(model, "all") == frozenset()


def test_optimized_away_probe_writes_nothing_beside_the_model(tmp_path: Path) -> None:
    """The probe reads the model file it is given and writes its optimized graph in a private folder."""
    model = _shape_gather_model(True)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert optimized_away_nodes(copy.deepcopy(model), "all", path) == {"Gather_1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_optimized_away_a_gather_the_transpose_optimizer_adds_hides_nothing(tmp_path: Path) -> None:
    """onnxruntime's transpose optimizer turns a ``Shape`` of a ``Transpose`` into a new ``Gather`` of a
    ``Shape`` (GPT-2's attention): that node stands for no gather of the model, so the folded shape gathers
    onnxruntime's saved graph no longer holds are still found (the probe said none before)."""
    path = Path(__file__).resolve().parent.parent / "onnx_models" / "real" / "gpt2_past_torchscript.onnx"
    model = onnx.load(str(path), load_external_data=False)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "basic.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    saved = onnx.load(str(tmp_path / "basic.onnx"), load_external_data=False)
    kept = {n.name for n in saved.graph.node} | {o for n in saved.graph.node for o in n.output}
    gathers = [n for n in model.graph.node if n.op_type == "Gather"]
    gone = {n.name for n in gathers if n.name not in kept and not set(n.output) & kept}
    assert "/model/transformer/h.0/attn/Gather_2" in gone  # onnxruntime's own graph, read directly
    assert optimized_away_nodes(model, "all", path) == gone


# -- NUL characters and bytes in paths ----------------------------------------------------------------


class _FsPath:
    """An ``os.PathLike`` whose ``__fspath__`` gives what it was made with (text or bytes)."""

    def __init__(self, value: str | bytes) -> None:
        self.value = value

    def __fspath__(self) -> str | bytes:
        return self.value


@pytest.mark.parametrize("tail", [b"", b"\x00junk"], ids=["plain", "nul"])
def test_a_pathlike_giving_bytes_is_a_model_path_as_in_onnxruntime(tail: bytes, tmp_path: Path) -> None:
    """onnxruntime opens the file an ``os.PathLike`` giving bytes names (up to a NUL); dmlshim raised
    ``TypeError: endswith first arg must be bytes`` (before: TypeError; now onnxruntime's values)."""
    path = _inline_model(tmp_path)
    source = _FsPath(os.fsencode(str(path)) + tail)
    expected = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, FEED)  # type: ignore[arg-type]
    got = dmlshim.InferenceSession(source).run(None, FEED)  # type: ignore[arg-type]
    assert same_bits(got, expected)


def test_a_model_path_starting_with_a_nul_is_no_such_file_as_in_onnxruntime(tmp_path: Path) -> None:
    """onnxruntime opens the empty name: NoSuchFile; dmlshim said InvalidProtobuf ("the model path is
    empty", onnxruntime's answer to an empty path, a TypeError)."""
    source = "\x00" + str(_inline_model(tmp_path))
    with pytest.raises(NoSuchFile):
        ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    with pytest.raises(NoSuchFile, match="NO_SUCHFILE"):
        dmlshim.InferenceSession(source)


_INSTALL_BYTES = """
import os, sys
import dmlshim
class P:
    def __fspath__(self):
        return os.fsencode(sys.argv[2])
target = os.fsencode(sys.argv[1]) if sys.argv[3] == "bytes" else P()
dmlshim.install(summary="off", summary_file=target, inputs=[os.fsencode(sys.argv[4])])
import onnxruntime
onnxruntime.InferenceSession(sys.argv[4], providers=["DmlExecutionProvider"])
"""


@pytest.mark.parametrize("form", ["bytes", "pathlike"])
def test_install_takes_a_summary_file_given_as_bytes(form: str, tmp_path: Path) -> None:
    """``install(summary_file=b"s.json")`` raised ``TypeError: str expected, not bytes`` after the file was
    checked (the environment holds text); now the summary is written there, the model untouched."""
    model = _inline_model(tmp_path)
    before = model.read_bytes()
    target = tmp_path / "s.json"
    env = {**os.environ, "PYTHONPATH": str(Path(dmlshim.__file__).parents[1])}
    for name in ("DMLSHIM_ORT_OWNER", "DMLSHIM_ORT_STATE", "DMLSHIM_ORT_SUMMARY_FILE"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", _INSTALL_BYTES, str(target), str(target), form, str(model)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(target.read_text())["totals"]["sessions"] == 1
    assert model.read_bytes() == before


# -- the careful writer: a file that appears at an output path while dmlshim runs -----------------------

_OURS = b"the bytes dmlshim is about to write\n" * 100


def _checked(path: Path) -> Path:
    """``path`` checked as a session checks its optimized model's (what is there now is remembered)."""
    return files.check_output_file(path, overwrite=True)


def test_a_hard_link_to_the_users_file_with_the_same_bytes_is_kept(tmp_path: Path) -> None:
    """The twin rule keeps it (nothing is lost), and the user's file keeps its inode and bytes."""
    users = tmp_path / "users.onnx"
    users.write_bytes(_OURS)
    target = _checked(tmp_path / "opt.onnx")
    os.link(users, target)
    files.write_bytes(target, _OURS, overwrite=True)
    assert os.path.samefile(users, target)
    assert users.read_bytes() == _OURS


@pytest.mark.parametrize("kind", ["symlink", "fifo", "other-bytes", "longer", "huge-sparse"])
def test_a_newcomer_that_is_no_twin_is_never_replaced(kind: str, tmp_path: Path) -> None:
    """A link to the same bytes, a FIFO (never opened to block), other bytes, the same bytes and more, a
    sparse file of 4 GiB: refused, untouched, at once."""
    users = tmp_path / "users.bin"
    users.write_bytes(_OURS)
    target = _checked(tmp_path / "opt.onnx")
    if kind == "symlink":
        target.symlink_to(users)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "huge-sparse":
        with open(target, "wb") as handle:
            handle.truncate(4 << 30)
    else:
        target.write_bytes(b"X" * len(_OURS) if kind == "other-bytes" else _OURS + b"more")
    before = os.lstat(target)
    with pytest.raises(BadInputError, match=r"appeared|regular files"):
        files.write_bytes(target, _OURS, overwrite=True)
    after = os.lstat(target)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert users.read_bytes() == _OURS


def test_two_writers_of_one_path_never_replace_a_file_that_appeared_after_both_checked(
    tmp_path: Path,
) -> None:
    """Two sessions of one program name one optimized model (both checked it, empty); the user's file
    appears; the first writer is refused. Before, the second wrote over it (the first write forgot the
    path, so the second took the user's file for what was there when it checked); now both are refused."""
    target = tmp_path / "opt.onnx"
    _checked(target)
    _checked(target)
    target.write_text(USERS)
    for data in (b"first session", b"second session"):
        with pytest.raises(BadInputError, match="appeared"):
            files.write_bytes(target, data, overwrite=True)
    assert target.read_text() == USERS


def test_a_file_that_appears_after_the_first_of_two_writers_wrote_is_kept(tmp_path: Path) -> None:
    """The first session writes the optimized model; then the user's file appears; the second session
    (checked before) is refused (before: it replaced the user's file)."""
    target = tmp_path / "opt.onnx"
    _checked(target)
    _checked(target)
    files.write_bytes(target, b"first session", overwrite=True)
    target.unlink()
    target.write_text(USERS)
    with pytest.raises(BadInputError, match=r"appeared|changed"):
        files.write_bytes(target, b"second session", overwrite=True)
    assert target.read_text() == USERS


def test_sessions_writing_one_optimized_model_one_after_another_still_replace_it(tmp_path: Path) -> None:
    """onnxruntime's behaviour for the program's own sessions is kept: each session replaces the file the
    previous one wrote (checked again at each session's start)."""
    target = tmp_path / "opt.onnx"
    for data in (b"one", b"two", b"three"):
        _checked(target)
        files.write_bytes(target, data, overwrite=True)
        assert target.read_bytes() == data


# -- the drop-in's workers ------------------------------------------------------------------------------

_LATE_CHILD = """
import numpy as np, onnxruntime as ort, sys
s = ort.InferenceSession(sys.argv[1], providers=["DmlExecutionProvider"])
print(float(s.run(None, {"i": np.array([1, 2], dtype=np.int64)})[0].sum()))
"""


def test_a_child_that_starts_after_the_run_ended_prints_no_second_summary(tmp_path: Path) -> None:
    """A child the run started (``pool.terminate()`` soon after ``Pool(2)`` with spawn: multiprocessing's
    resource tracker or a worker still starting) that comes up after the first process printed the summary
    and removed its state folder took the run for its own: a second, empty summary on stderr, and
    "could not bind dmlshim ...: the summary file exists". It is now a worker of the ended run: nothing
    printed, the summary file (the run's, or the user's) untouched, its values onnxruntime's."""
    from dmlshim.ort import install as drop_in

    model = _inline_model(tmp_path)
    summary = tmp_path / "s.json"
    summary.write_text(USERS)
    gone = Path(tempfile.gettempdir()) / f"{drop_in.STATE_PREFIX}gone-{os.getpid()}"
    assert not gone.exists()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([drop_in.BOOT_DIR, str(Path(dmlshim.__file__).parents[1])]),
    }
    env.update(
        {
            drop_in.INSTALL_ENV: "1",
            drop_in.OWNER_ENV: str(os.getpid()),  # this test is the child's parent: the run's first process
            drop_in.STATE_ENV: str(gone),
            drop_in.SUMMARY_FILE_ENV: str(summary),
            drop_in.SUMMARY_ENV: "text",
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", _LATE_CHILD, str(model)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, FEED)[0]
    assert float(done.stdout.split()[-1]) == float(expected.sum())
    assert "dmlshim" not in done.stderr, done.stderr[-2000:]
    assert summary.read_text() == USERS
    assert not gone.exists()


_HOSTILE_NAMES = [
    'q"uote',
    "back\\slash",
    "ctl\x01\x1f\n\t",
    tracking._HOLE,
    "uni\u2028\u00e9\U0001f600",
    '{"runs":1}',
]


def _hostile_names_model(path: Path) -> None:
    """Gathers and ScatterElements (duplicate writes) named with JSON-hostile text, the template's mark."""
    nodes, prev = [], "x"
    for i, name in enumerate(_HOSTILE_NAMES):
        if i % 2 == 0:
            nodes.append(oh.make_node("Gather", [prev, "gi"], [f"v{i}"], axis=0, name=name))
        else:
            nodes.append(oh.make_node("ScatterElements", [prev, "si", "up"], [f"v{i}"], axis=0, name=name))
        prev = f"v{i}"
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
            oh.make_tensor_value_info("gi", TensorProto.INT64, [4]),
            oh.make_tensor_value_info("si", TensorProto.INT64, [2, 3]),
            oh.make_tensor_value_info("up", TensorProto.FLOAT, [2, 3]),
        ],
        [oh.make_tensor_value_info(prev, TensorProto.FLOAT, None)],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), os.fsencode(path))


_POOL = """
import os, sys, time, numpy as np, multiprocessing as mp
import onnxruntime as ort
class _Name:  # the file name's bytes, which onnxruntime opens (a str that is no UTF-8 is its TypeError)
    def __fspath__(self): return os.fsencode(sys.argv[1])
P = _Name()
F = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "gi": np.array([3, -1, 0, 1]),
     "si": np.array([[0, 0, 0], [0, 1, 2]]), "up": np.ones((2, 3), np.float32)}
S = None
def work(i):
    global S
    if S is None:
        S = ort.InferenceSession(P, providers=["DmlExecutionProvider"])
    return S.run(None, F)[0].tolist()
if __name__ == "__main__":
    mp.set_start_method("fork")
    pool = mp.Pool(2)
    if sys.argv[2] == "all":
        print(pool.map(work, range(40), chunksize=1)[-1])
        pool.close()
    else:  # the pool's SIGTERM while its workers run
        pool.map_async(work, range(10**6), chunksize=1)
        time.sleep(float(sys.argv[2]))
        pool.terminate()
    pool.join()
"""


@pytest.mark.parametrize("how", ["all", "1.5", "3"])
def test_forked_workers_with_hostile_node_names_leave_a_whole_summary(how: str, tmp_path: Path) -> None:
    """Node names holding quotes, backslashes, control characters, U+2028, an emoji and the tally
    template's own mark, in a model whose file name is not UTF-8 (given as its bytes through an os.PathLike,
    as onnxruntime opens it: as text it is onnxruntime's TypeError, tests/test_parity54.py), run by a forked
    pool (to the end, or ended by its SIGTERM mid-run): the summary file is valid JSON with every name
    exact and every run counted once (the workers' tallies are written after each run)."""
    model = os.fsencode(str(tmp_path)) + b"/m\xff.onnx"
    _hostile_names_model(Path(os.fsdecode(model)))
    (tmp_path / "prog.py").write_text(_POOL)
    env = {**os.environ, "PYTHONPATH": str(Path(dmlshim.__file__).parents[1])}
    for name in ("DMLSHIM_ORT_OWNER", "DMLSHIM_ORT_STATE", "DMLSHIM_ORT_SUMMARY_FILE"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlshim.ort",
            "--summary",
            "off",
            "--summary-file",
            "s.json",
            "prog.py",
            model,
            how,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    sessions = summary["sessions"]
    assert {s["model"] for s in sessions} == {os.fsdecode(model)}
    for session in sessions:
        assert [n["name"] for n in session["nodes"]] == _HOSTILE_NAMES
        assert all(sum(n["runs"].values()) == session["runs"] for n in session["nodes"])
    if how == "all":
        assert summary["totals"]["runs"] == 40
        feeds = {
            "x": np.arange(12, dtype=np.float32).reshape(4, 3),
            "gi": np.array([3, -1, 0, 1]),
            "si": np.array([[0, 0, 0], [0, 1, 2]]),
            "up": np.ones((2, 3), np.float32),
        }
        # onnxruntime cannot take this name as text (a TypeError from pybind11): the model's bytes
        reference = ort.InferenceSession(
            Path(os.fsdecode(model)).read_bytes(), providers=["CPUExecutionProvider"]
        )
        assert done.stdout.decode().strip() == str(reference.run(None, feeds)[0].tolist())


def test_the_tally_text_of_surrogate_and_control_names_is_the_whole_encoding() -> None:
    """The template's text equals the whole encoding for a model path holding a surrogate (a file name
    that is not UTF-8) and names of every hostile kind, over many sessions and runs."""
    encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
    tracker = tracking.Tracker()
    tallies = [
        tracker.add_session(f"/m/\udcff{i}.onnx", ["DmlExecutionProvider"], "partitioned") for i in range(50)
    ]
    for run in range(5):
        for i, tally in enumerate(tallies):
            nodes = tuple(
                NodeRecord(name=n, op_type="Gather", placement="dml", status="dml", duplicate_indices=run % 2)
                for n in _HOSTILE_NAMES[: 1 + (i + run) % len(_HOSTILE_NAMES)]
            )
            tracker.add_run(
                tally, RunRecord(engine="partitioned", feature_level="DML_FEATURE_LEVEL_5_0", nodes=nodes)
            )
        text = tracker.to_text(encoder)
        assert text == encoder.encode(tracker.to_json())
        assert json.loads(text) == json.loads(encoder.encode(tracker.to_json()))


# -- the whole-model check's copies for heavy runs --------------------------------------------------------


def _heavy_session(monkeypatch: pytest.MonkeyPatch) -> tuple[dmlshim.InferenceSession, ort.InferenceSession]:
    """test_lean_heavy_runs53's model with every run past the bound (so its full runs answer with copies
    and the full session is released when the lean one takes over)."""
    from dmlshim.execute.engines import whole_model

    from .test_lean_heavy_runs53 import _model as _lean_model
    from .test_lean_heavy_runs53 import _ort

    monkeypatch.setattr(whole_model, "KEEP_FULL_MAX_BYTES", 64)
    model = _lean_model()
    return dmlshim.InferenceSession(model.SerializeToString()), _ort(model)


def test_outputs_kept_and_scribbled_over_across_the_switch_keep_onnxruntimes_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outputs the caller keeps across runs (before, at and after the switch to the lean session, and
    back to the full check on negative indices) keep their values; writing over an output never changes
    a later run's answer."""
    from .test_lean_heavy_runs53 import _feeds

    session, reference = _heavy_session(monkeypatch)
    kept = []
    for run in range(1, 10):
        feeds = _feeds(6, seed=run, gidx=[5, -1, 2] if run == 7 else None)
        expected = reference.run(None, feeds)
        scribbled = session.run(None, feeds)
        for array in scribbled:
            array[...] = 12345.0
        got = session.run(None, feeds)
        assert same_bits(got, expected), run
        kept.append((got, [a.copy() for a in expected]))
    assert session._engine._check.lean_runs > 0
    for run, (got, expected) in enumerate(kept, 1):
        assert same_bits(got, expected), run


def test_ort_values_and_io_binding_across_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_lean_heavy_runs53 import _feeds

    session, reference = _heavy_session(monkeypatch)
    for run in range(1, 10):
        feeds = _feeds(6, seed=run)
        expected = reference.run(None, feeds)
        values = session.run_with_ort_values(
            None, {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        )
        assert same_bits([v.numpy() for v in values], expected), run
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
        assert same_bits(binding.copy_outputs_to_cpu(), expected), run


def test_threads_running_one_session_across_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_lean_heavy_runs53 import _feeds

    session, reference = _heavy_session(monkeypatch)
    wrong: list[object] = []

    def work(thread: int) -> None:
        try:
            for run in range(25):
                feeds = _feeds(6, seed=thread * 100 + run, gidx=[5, -1, 2] if run % 11 == 10 else None)
                if not same_bits(session.run(None, feeds), reference.run(None, feeds)):
                    wrong.append((thread, run))
        except Exception as exc:  # reported below
            wrong.append(repr(exc))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not wrong


_PRINTS = 'print("the program ran")\n'


@pytest.mark.parametrize("summary", ["prog.py\x00", "s\x00.json"], ids=["the-script-cut", "a-users-file-cut"])
def test_the_drop_in_runner_refuses_a_summary_file_with_a_nul(
    summary: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m dmlshim.ort``'s ``main([...])`` (a command line holds no NUL) raised ``ValueError:
    embedded null byte`` from the check that the summary is not one of the program's files; now the
    summary file is refused with its reason, exit 2, before the program runs, nothing written."""
    from dmlshim.ort.__main__ import main as drop_in_main

    monkeypatch.chdir(tmp_path)
    for name in ("DMLSHIM_ORT_OWNER", "DMLSHIM_ORT_STATE", "DMLSHIM_ORT_SUMMARY_FILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "prog.py").write_text(_PRINTS)
    (tmp_path / "s").write_text(USERS)
    assert drop_in_main(["--summary-file", summary, "--overwrite", "prog.py"]) == 2
    captured = capsys.readouterr()
    assert "NUL" in captured.err and "the program ran" not in captured.out
    assert (tmp_path / "prog.py").read_text() == _PRINTS
    assert (tmp_path / "s").read_text() == USERS
    assert not dmlshim.ort.installed()


def test_a_config_entry_naming_the_optimized_weights_with_a_nul_is_cut_by_onnxruntime_itself(
    tmp_path: Path,
) -> None:
    """onnxruntime stores a session config entry up to its NUL (``get_session_config_entry`` gives
    ``w.bin``): both write the optimized model's weights to ``w.bin``, the same graph pointing there."""
    model = _inline_model(tmp_path)
    written = {}
    for name, session in (("ort", ort.InferenceSession), ("dml", dmlshim.InferenceSession)):
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / f"opt_{name}.onnx")
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", f"w_{name}.bin\x00junk"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1"
        )
        assert options.get_session_config_entry(
            "session.optimized_model_external_initializers_file_name"
        ) == (f"w_{name}.bin")
        kwargs = {"providers": ["CPUExecutionProvider"]} if name == "ort" else {}
        session(str(model), options, **kwargs)
        saved = onnx.load(str(tmp_path / f"opt_{name}.onnx"), load_external_data=False)
        written[name] = {
            e.value for t in saved.graph.initializer for e in t.external_data if e.key == "location"
        }
        assert (tmp_path / f"w_{name}.bin").is_file()
    assert written == {"ort": {"w_ort.bin"}, "dml": {"w_dml.bin"}}


def test_a_twin_that_changes_right_after_the_comparison_is_kept_as_it_is_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison says the same bytes, then the user writes to the file: it is kept (dmlshim's bytes
    are dropped), the user's change stays."""
    target = _checked(tmp_path / "opt.onnx")
    target.write_bytes(_OURS)
    real = files.same_bytes

    def then_changed(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
        same = real(a, b)
        Path(a).write_text(USERS)
        return same

    monkeypatch.setattr(files, "same_bytes", then_changed)
    files.write_bytes(target, _OURS, overwrite=True)
    assert target.read_text() == USERS
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_newcomer_with_the_same_bytes_is_refused_not_replaced(tmp_path: Path) -> None:
    target = _checked(tmp_path / "opt.onnx")
    target.write_bytes(_OURS)
    target.chmod(0)
    with pytest.raises(BadInputError, match="appeared"):
        files.write_bytes(target, _OURS, overwrite=True)
    target.chmod(0o600)
    assert target.read_bytes() == _OURS


def test_a_worker_with_many_sessions_makes_only_the_changed_sessions_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that makes a session per task keeps every session in its tally; after each run the text
    of every one was made again (1000 sessions: 12 ms a run, a run of a small model is 10-20 us). Only the
    session that changed is made again now, and the text is still the whole encoding."""
    encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
    tracker = tracking.Tracker()
    tallies = [tracker.add_session(f"m{i}.onnx", ["DmlExecutionProvider"], "partitioned") for i in range(200)]
    record = RunRecord(
        engine="partitioned",
        feature_level="DML_FEATURE_LEVEL_5_0",
        nodes=(NodeRecord(name="g", op_type="Gather", placement="dml", status="dml"),),
    )
    for tally in tallies:
        tracker.add_run(tally, record)
    tracker.to_text(encoder)
    made: list[int] = []
    real = tracking.SessionTally._made_text

    def counted(self: tracking.SessionTally, pid: int, enc: json.JSONEncoder) -> str:
        made.append(self.number)
        return real(self, pid, enc)

    monkeypatch.setattr(tracking.SessionTally, "_made_text", counted)
    for number in (7, 7, 150):
        tracker.add_run(tallies[number - 1], record)
        assert tracker.to_text(encoder) == encoder.encode(tracker.to_json())
    tracker.add_failure(tallies[0], ValueError("boom"))
    tracker.undo_run(tallies[1])
    assert tracker.to_text(encoder) == encoder.encode(tracker.to_json())
    assert made == [7, 7, 150, 1, 2]


@pytest.mark.parametrize("command", ["run", "inspect", "validate", "lower", "export"])
def test_the_cli_refuses_a_model_path_starting_with_a_nul_as_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name read is empty (onnxruntime: NoSuchFile): exit 2 naming the argument, no traceback."""
    from dmlshim.cli.main import main as cli

    argv = [command, "\x00m.onnx"] + (["-o", "out"] if command in ("lower", "export") else [])
    with pytest.raises(SystemExit) as ended:
        cli(argv)
    assert ended.value.code == 2
    assert "starts with a NUL character" in capsys.readouterr().err


def test_no_environment_variable_dmlshim_reads_can_hold_a_nul(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DMLSHIM_ORT_SUMMARY_FILE``, ``DMLSHIM_CACHE_DIR``, ...: the environment holds C strings, so
    Python refuses the value before dmlshim sees it (the case holds by construction)."""
    for name in ("DMLSHIM_ORT_SUMMARY_FILE", "DMLSHIM_CACHE_DIR", "DMLSHIM_DIRECTML_STACK"):
        with pytest.raises(ValueError, match="null"):
            monkeypatch.setenv(name, "s\x00.json")


def test_the_tally_text_follows_the_encoder_it_is_asked_with() -> None:
    """The text made for one encoder (compact) is not handed to another (indented) for the same tally."""
    compact = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
    indented = json.JSONEncoder(allow_nan=False, indent=1)
    tracker = tracking.Tracker()
    tally = tracker.add_session("m.onnx", ["DmlExecutionProvider"], "partitioned")
    record = RunRecord(
        engine="partitioned",
        feature_level="DML_FEATURE_LEVEL_5_0",
        nodes=(NodeRecord(name="g", op_type="Gather", placement="dml", status="dml"),),
    )
    for _ in range(2):
        tracker.add_run(tally, record)
        for encoder in (compact, indented, compact):
            assert tally.to_text(os.getpid(), encoder) == encoder.encode(tally.to_json(os.getpid()))
