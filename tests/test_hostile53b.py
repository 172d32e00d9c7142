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
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnxruntime.capi.onnxruntime_pybind11_state import NoSuchFile

import dmlshim
from dmlshim.directml.optimized_away import optimized_away_nodes
from dmlshim.errors import BadInputError
from dmlshim.fileio import files
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
