"""Hostile round 55 (issue 35), the file cases: what a session reads and what dmlshim writes, each case
kept, the ones that held and the ones fixed (see tests/test_hostile55.py for the round's summary).

Fixed: the drop-in's summary replaced the program's optimized model at its path; ``export -o link
--overwrite`` removed a regular file put in the link's place during the export, and a previous export's
node folder made a link meanwhile had the files of the link's target removed; a session built from an
``onnx.ModelProto`` followed the caller's later edits of the proto. Held: a Constant's external value and
a bytes model's external data cut short, a data link repointed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

from .test_hostile55 import ENGINES, V, _engine, _model, _providers, _reference, _sized_model


def test_the_summary_never_replaces_the_programs_optimized_model(tmp_path: Path) -> None:
    """``python -m dmlshim.ort --summary-file opt.onnx --overwrite s.py`` where ``s.py`` builds a session
    with ``optimized_model_filepath = "opt.onnx"``: the program's optimized model was replaced by the JSON
    summary at exit (dmlshim itself had written it, for the program, so it did not count as a file that
    appeared meanwhile); now it is kept as it is, and the summary is refused as for any file the program
    wrote there. The optimized model is the one onnxruntime writes for the same program."""
    model = tmp_path / "m.onnx"
    model.write_bytes(_sized_model("pad")[0])
    script = tmp_path / "s.py"
    script.write_text(
        "import onnxruntime as ort\n"
        "so = ort.SessionOptions()\n"
        "so.optimized_model_filepath = 'opt.onnx'\n"
        "ort.InferenceSession('m.onnx', so, providers=['DmlExecutionProvider', 'CPUExecutionProvider'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "provider")}
    argv = [
        sys.executable,
        "-m",
        "dmlshim.ort",
        "--summary",
        "off",
        "--summary-file",
        "opt.onnx",
        "--overwrite",
    ]
    done = subprocess.run([*argv, "s.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "appeared while dmlshim was running" in done.stderr, done.stderr
    written = onnx.load(str(tmp_path / "opt.onnx"))  # still a model, not the summary's JSON
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "theirs.onnx")
    onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in written.graph.node] == [
        n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node
    ]


# --- attacks that held, kept as tests ------------------------------------------------------------------


def _external_table_model(folder: Path, *, constant: bool) -> tuple[Path, dict[str, np.ndarray]]:
    """``y = -Gather(table, ids)``, a 4096x64 float table in ``w.bin``: an initializer, or (``constant``)
    the value of a Constant node whose tensor keeps its bytes in that file (``onnx.save(...,
    convert_attribute=True)`` writes such models)."""
    table = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    tensor = numpy_helper.from_array(table, "table")
    (folder / "w.bin").write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(table.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    inits = []
    if constant:
        nodes.insert(0, helper.make_node("Constant", [], ["table"], value=tensor, name="const"))
    else:
        inits.append(tensor)
    path = folder / "m.onnx"
    path.write_bytes(
        _model(nodes, [V("ids", TensorProto.INT64, [None])], [V("y", TensorProto.FLOAT, None)], inits, 17)
    )
    return path, {"ids": np.array([1, 4095, 7], np.int64)}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_constant_whose_value_is_external_data_cut_short_never_crashes(engine: str, tmp_path: Path) -> None:
    """Held: dmlshim reads a Constant's external value into the session (onnxruntime maps it, and its
    own session dies of SIGBUS on a run after the file is cut); every run after ``w.bin`` is cut to 100
    bytes, and after ``set_providers``, gives the values the session was built with."""
    path, feeds = _external_table_model(tmp_path, constant=True)
    options = onnxruntime.SessionOptions()
    want = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    session = dmlshim.InferenceSession(str(path), **_engine(engine))
    np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])
    os.truncate(tmp_path / "w.bin", 100)
    for _ in range(4):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])
    session.set_providers(_providers(engine))
    np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_external_data_of_a_model_given_as_bytes_cut_short_never_crashes(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a model given as bytes reads its external data from the working directory, as onnxruntime
    does; cut to 100 bytes after the session is built, or the directory changed, the runs still give the
    values the session was built with."""
    path, feeds = _external_table_model(tmp_path, constant=False)
    monkeypatch.chdir(tmp_path)
    data = path.read_bytes()
    want = _reference(data, feeds)
    session = dmlshim.InferenceSession(data, **_engine(engine))
    for _ in range(4):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])
    os.truncate(tmp_path / "w.bin", 100)
    other = tmp_path / "other"
    other.mkdir()
    (other / "w.bin").write_bytes(b"\x7f" * 4096 * 64 * 4)
    monkeypatch.chdir(other)
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_data_link_pointed_elsewhere_keeps_onnxruntimes_values(engine: str, tmp_path: Path) -> None:
    """Held: ``w.bin`` a symbolic link to ``real1.bin``, replaced after the session is built by a link
    to a shorter ``real2.bin`` (``ln -sf``, a rename): onnxruntime keeps the old file mapped and so does
    every engine (no "cut short" refusal from the link's new target); ``set_providers`` then refuses,
    naming the file, as for any change."""
    path, feeds = _external_table_model(tmp_path, constant=False)
    os.rename(tmp_path / "w.bin", tmp_path / "real1.bin")
    os.symlink("real1.bin", tmp_path / "w.bin")
    theirs = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = theirs.run(None, feeds)
    session = dmlshim.InferenceSession(str(path), **_engine(engine))
    for _ in range(4):
        session.run(None, feeds)
    (tmp_path / "real2.bin").write_bytes(b"\x7f" * 100)
    os.symlink("real2.bin", tmp_path / "link.tmp")
    os.replace(tmp_path / "link.tmp", tmp_path / "w.bin")
    for _ in range(3):
        np.testing.assert_array_equal(theirs.run(None, feeds)[0], want[0])
        np.testing.assert_array_equal(session.run(None, feeds)[0], want[0])
    with pytest.raises(dmlshim.errors.BadModelError, match="changed since the session was created"):
        session.set_providers(_providers(engine))


@pytest.mark.parametrize("meanwhile", ["file", "folder", "another_link", "same_link"])
def test_export_over_a_link_never_removes_what_replaced_the_link_meanwhile(
    meanwhile: str, tmp_path: Path
) -> None:
    """``export -o out --overwrite`` with ``out`` a symbolic link: the link is replaced by the export.
    When the user replaced the link during the export by a regular file, the commit's ``os.unlink``
    removed that file (a folder or another link fared the same or were replaced); now anything but the
    link that was checked is refused, kept as it is, and no staging folder is left."""
    from dmlshim.errors import BadInputError
    from dmlshim.fileio.folders import StagedFolder

    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "out"
    target.symlink_to("elsewhere")
    stage = StagedFolder(target, overwrite=True, what="export directory")
    with stage:
        (stage.path / "index.json").write_text("{}")
        if meanwhile != "same_link":
            target.unlink()
        if meanwhile == "file":
            target.write_text("the user's")
        elif meanwhile == "folder":
            target.mkdir()
            (target / "mine.txt").write_text("the user's")
        elif meanwhile == "another_link":
            target.symlink_to(tmp_path / "third")
        if meanwhile == "same_link":
            stage.commit(last="index.json")
        else:
            with pytest.raises(BadInputError, match="changed while dmlshim was running"):
                stage.commit(last="index.json")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["elsewhere", "out"], names
    assert not any((tmp_path / "elsewhere").iterdir())  # the link's target is never written
    if meanwhile == "same_link":
        assert not target.is_symlink() and (target / "index.json").is_file()
    elif meanwhile == "file":
        assert target.read_text() == "the user's"
    elif meanwhile == "folder":
        assert (target / "mine.txt").read_text() == "the user's"
    else:
        assert os.readlink(target) == str(tmp_path / "third")


def test_export_overwrite_never_follows_a_listed_folder_made_a_link_meanwhile(tmp_path: Path) -> None:
    """``export -o DIR --overwrite`` over a previous export whose node folder ``000_g`` the user replaced,
    during the new export, by a link to a folder of theirs: the commit removed the regular files inside
    the link's target (``iterdir`` follows a link) before failing on ``rmdir``. Now refused, with the
    user's folder and the previous export whole."""
    from dmlshim.errors import BadInputError
    from dmlshim.fileio.folders import StagedFolder

    target = tmp_path / "DIR"
    (target / "000_g").mkdir(parents=True)
    (target / "000_g" / "input.npy").write_bytes(b"old")
    (target / "index.json").write_text("{}")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("the user's")
    stage = StagedFolder(
        target, overwrite=True, previous=lambda _: ["000_g", "index.json"], what="export directory"
    )
    with stage:
        (stage.path / "000_g").mkdir()
        (stage.path / "000_g" / "input.npy").write_bytes(b"new")
        (stage.path / "index.json").write_text("{}")
        (target / "000_g" / "input.npy").unlink()
        (target / "000_g").rmdir()
        (target / "000_g").symlink_to(mine)
        with pytest.raises(BadInputError, match="changed while dmlshim was running"):
            stage.commit(last="index.json")
    assert (mine / "thesis.txt").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR", "mine"]
    assert (target / "index.json").is_file() and (target / "000_g").is_symlink()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_session_from_a_model_proto_keeps_its_weights_when_the_proto_changes(engine: str) -> None:
    """``InferenceSession(proto)`` (an ``onnx.ModelProto``, which dmlshim takes where onnxruntime takes its
    bytes), then the caller edits the proto in place (an initializer's and a Constant's bytes zeroed, a
    node removed, as a program reusing one proto for a second session might): the partitioned engine's
    very next runs read the zeroed weights, and every engine's ``set_providers`` rebuilt from the edited
    proto (zeros, or "node 'n' reads 'g', which no node ... provides"). Now the session holds its own copy,
    as onnxruntime's holds its own copy of the bytes: every run gives onnxruntime's values of the model
    as it was."""
    table = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    nodes = [
        helper.make_node("Gather", ["w", "i"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="n"),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(table + 1, "cv")),
        helper.make_node("Gather", ["c", "i"], ["y2"], axis=0, name="gather2"),
    ]
    graph = helper.make_graph(
        nodes,
        "proto",
        [V("i", TensorProto.INT64, [None])],
        [V("y", TensorProto.FLOAT, None), V("y2", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 10
    feeds = {"i": np.array([1, 4095, 7], np.int64)}
    want = _reference(proto.SerializeToString(), feeds)
    session = dmlshim.InferenceSession(proto, **_engine(engine))
    for got, expected in zip(session.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    proto.graph.initializer[0].raw_data = bytes(table.nbytes)
    proto.graph.node[2].attribute[0].t.raw_data = bytes(table.nbytes)
    del proto.graph.node[1]
    for _ in range(5):  # the first runs and the steady ones
        for got, expected in zip(session.run(None, feeds), want, strict=True):
            np.testing.assert_array_equal(got, expected)
    session.set_providers(_providers(engine))
    for got, expected in zip(session.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, expected)
