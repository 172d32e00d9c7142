"""Hostile round 49b, files: a run ended by SIGTERM or SIGHUP while dmlshim writes leaves nothing in the
target's folder (the temporary file beside an output, an export's hidden staging folder), and the process
still ends by that signal; a handler the program installed is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

PROVIDER = str(Path(__file__).resolve().parents[1] / "provider")


def _gather_model(folder: Path, second: bool = False) -> Path:
    """``folder/m.onnx``: y = Gather(x[4], i[2]) on axis 0 (and, ``second``, z the same by node 'h')."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    if second:
        nodes.append(helper.make_node("Gather", ["x", "i"], ["z"], axis=0, name="h"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        outputs,
    )
    model = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), model)
    return model


def _default_signals() -> None:
    # as a program started from a terminal has them, whatever this test runner inherited (nohup ignores
    # SIGHUP)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def _run(code: str, cwd: Path, *, nohup: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PROVIDER}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_ignored_hangup if nohup else _default_signals,
    )


def _ignored_hangup() -> None:
    _default_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_program_run_under_nohup_keeps_ignoring_the_hangup(tmp_path: Path) -> None:
    """An ignored SIGHUP (``nohup``) stays ignored during a write, and after it: the write completes."""
    done = _run(
        """
        import os, signal
        from dmlshim.fileio import files
        def writer(handle):
            handle.write(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGHUP)
            handle.write(b"y" * 1000)
        files.write_stream("result.bin", writer)
        print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
        """,
        tmp_path,
        nohup=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
    assert (tmp_path / "result.bin").read_bytes() == b"x" * 1000 + b"y" * 1000


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_signal_during_file_write_leaves_no_temporary_file(tmp_path: Path, sig: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = _run(
        f"""
        import os, signal
        from dmlshim.fileio import files
        def writer(handle):
            handle.write(b"x" * 100000)
            handle.flush()
            os.kill(os.getpid(), signal.{sig})
            handle.write(b"y" * 100000)
        files.write_stream("out/result.npz", writer)
        print("not reached")
        """,
        tmp_path,
    )
    assert done.returncode == -getattr(signal, sig), done.stderr
    assert "not reached" not in done.stdout
    assert sorted(os.listdir(out)) == []


def test_signal_during_export_staging_leaves_no_staging_folder(tmp_path: Path) -> None:
    done = _run(
        """
        import os, signal
        from dmlshim.fileio.folders import StagedFolder
        with StagedFolder("exp") as staged:
            (staged.path / "node").mkdir()
            (staged.path / "node" / "a.bin").write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGTERM)
            staged.commit()
        print("not reached")
        """,
        tmp_path,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_signal_before_commit_of_existing_output_keeps_the_old_file(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text("old\n")
    done = _run(
        """
        import os, signal
        from dmlshim.fileio import files
        def writer(handle):
            handle.write(b"new")
            os.kill(os.getpid(), signal.SIGTERM)
        files.write_stream("out.json", writer, overwrite=True)
        """,
        tmp_path,
    )
    assert done.returncode == -signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["out.json"]
    assert (tmp_path / "out.json").read_text() == "old\n"


def test_program_handler_is_left_alone(tmp_path: Path) -> None:
    done = _run(
        """
        import os, signal
        from dmlshim.fileio import files
        seen = []
        signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
        def writer(handle):
            handle.write(b"a")
            os.kill(os.getpid(), signal.SIGTERM)
            handle.write(b"b")
        files.write_stream("out.bin", writer)
        print(seen, signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"[{int(signal.SIGTERM)}]", "True"]
    assert (tmp_path / "out.bin").read_bytes() == b"ab"


def test_default_handlers_are_restored_after_a_write(tmp_path: Path) -> None:
    done = _run(
        """
        import signal
        from dmlshim.fileio import files
        files.write_text("a.txt", "a")
        print(*(signal.getsignal(s) is signal.SIG_DFL for s in (signal.SIGTERM, signal.SIGHUP)))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_cli_export_ended_by_sigterm_midway_leaves_nothing(tmp_path: Path) -> None:
    """The CLI: SIGTERM sent while export's staging folder exists (the writer is slowed to make sure)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "W")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "idx"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, tmp_path / "m.onnx")
    (tmp_path / "out").mkdir()
    done = _run(
        """
        import os, signal, sys
        from dmlshim.fileio import folders
        real_commit = folders.StagedFolder.commit
        def commit(self, last=None):
            os.kill(os.getpid(), signal.SIGTERM)
            real_commit(self, last)
        folders.StagedFolder.commit = commit
        from dmlshim.cli.main import main
        sys.exit(main(["export", "m.onnx", "-o", "out/exp", "-q"]))
        """,
        tmp_path,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert os.listdir(tmp_path / "out") == []


def test_profile_goes_where_the_working_directory_was_when_the_session_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime opens the profile when the session starts: a relative prefix names a file in that
    working directory even when the program changed directory before end_profiling (dmlshim wrote it in
    the new one, outside the guard that keeps a file written meanwhile)."""
    import numpy as np
    import onnxruntime

    import dmlshim

    model = _gather_model(tmp_path)
    feeds = {"x": np.arange(4, dtype=np.float32), "i": np.array([1, -1])}
    for name, module, providers in (
        ("ort", onnxruntime, ["CPUExecutionProvider"]),
        ("dml", dmlshim, ["DmlExecutionProvider"]),
        ("dml_cpu", dmlshim, ["CPUExecutionProvider"]),
    ):
        (tmp_path / name / "start").mkdir(parents=True)
        (tmp_path / name / "end").mkdir()
        monkeypatch.chdir(tmp_path / name / "start")
        so = onnxruntime.SessionOptions()
        so.enable_profiling, so.profile_file_prefix = True, "prof"
        session = module.InferenceSession(str(model), so, providers=providers)
        session.run(None, feeds)
        monkeypatch.chdir(tmp_path / name / "end")
        returned = session.end_profiling()
        assert returned.startswith("prof_") and "/" not in returned
        assert os.listdir(tmp_path / name / "end") == []
        assert os.listdir(tmp_path / name / "start") == [returned]


@pytest.mark.parametrize("name", ["\U0001f600" * 62 + ".npz", "\u20ac" * 84, "é" * 127, "a" * 255])
def test_long_multibyte_names_are_written(tmp_path: Path, name: str) -> None:
    """A legal name near the 255-byte limit: its temporary file's name must fit too (cut at 80
    characters, 62 emoji left 266 bytes: 'File name too long')."""
    from dmlshim.fileio import files
    from dmlshim.fileio.folders import StagedFolder

    assert len(os.fsencode(name)) <= 255
    written = files.write_bytes(tmp_path / name, b"data")
    assert written.read_bytes() == b"data"
    with StagedFolder(tmp_path / "exports" / name) as staged:
        (staged.path / "a.bin").write_bytes(b"x")
        staged.commit()
    assert sorted(os.listdir(tmp_path)) == sorted([name, "exports"])
    assert os.listdir(tmp_path / "exports" / name) == ["a.bin"]


def test_temp_prefix_counts_bytes_and_keeps_undecodable_names() -> None:
    from dmlshim.fileio.files import temp_prefix

    assert temp_prefix("out.npz") == ".out.npz."
    assert len(os.fsencode(temp_prefix("\U0001f600" * 70))) <= 82
    raw = os.fsdecode(b"\xff\xfe" * 60)  # undecodable bytes, as a POSIX name may hold
    assert len(os.fsencode(temp_prefix(raw))) <= 82


def _as_nobody() -> list[str] | None:
    """The command prefix that runs a child as an unprivileged user (root's writes pass every mode)."""
    import shutil

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    # the user must reach this Python's packages (a venv in a private temporary folder: it cannot)
    env = {**os.environ, "PYTHONPATH": PROVIDER}
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import numpy, onnx, onnxruntime, dmlshim"],
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    return prefix if probe.returncode == 0 else None


PROTECTED = """
import sys
import dmlshim, onnxruntime
from dmlshim.fileio import files
results = []
try:
    files.write_bytes("theirs.npz", b"new", overwrite=True)
    results.append("replaced")
except dmlshim.BadInputError as exc:
    results.append("refused" if "write-protected" in str(exc) else str(exc))
so = onnxruntime.SessionOptions()
so.optimized_model_filepath = "opt.onnx"
for module in (onnxruntime, dmlshim):
    try:
        module.InferenceSession("m.onnx", so, providers=["CPUExecutionProvider"])
        results.append("written")
    except Exception as exc:
        results.append("refused " + type(exc).__name__)
print(" ".join(r.split()[0] for r in results))
"""


def test_write_protected_files_are_not_replaced(tmp_path: Path) -> None:
    """onnxruntime cannot open a file the process may not write (SystemError : 13); dmlshim renamed over
    it, which the folder's permission allowed, destroying a file its owner had protected."""
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("as root: no setpriv, or its unprivileged user cannot import this Python's packages")

    _gather_model(tmp_path)
    for name in ("theirs.npz", "opt.onnx"):
        (tmp_path / name).write_bytes(b"precious")
        (tmp_path / name).chmod(0o444)
    (tmp_path / "m.onnx").chmod(0o644)
    tmp_path.chmod(0o777)  # the folder allows the rename: only the file's mode protects it
    env = {**os.environ, "PYTHONPATH": PROVIDER, "HOME": str(tmp_path)}
    done = subprocess.run(
        [*prefix, sys.executable, "-c", PROTECTED],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # onnxruntime refuses (1.32: ModelRequiresCompilation, "SystemError : 13"); so does dmlshim
    assert done.stdout.split() == ["refused", "refused", "refused"], done.stdout
    for name in ("theirs.npz", "opt.onnx"):
        assert (tmp_path / name).read_bytes() == b"precious"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_write_protected_check_is_the_process_permission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process (also as root): the writer asks os.access, and a writable file is replaced as before."""
    from dmlshim.errors import BadInputError
    from dmlshim.fileio import files

    target = tmp_path / "out.json"
    target.write_text("old")
    files.write_text(target, "new", overwrite=True)
    assert target.read_text() == "new"
    monkeypatch.setattr(files.os, "access", lambda path, mode, **kw: mode != os.W_OK)
    with pytest.raises(BadInputError, match="write-protected"):
        files.write_text(target, "newer", overwrite=True)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    files.write_text(link, "via link", overwrite=True)  # the link is replaced, its target untouched
    assert target.read_text() == "new" and link.read_text() == "via link" and not link.is_symlink()


@pytest.mark.parametrize("kind", ["hard_link", "link_to_dir", "dangling", "link_to_file"])
def test_replacing_links_never_touches_what_they_lead_to(tmp_path: Path, kind: str) -> None:
    from dmlshim.fileio import files

    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "keep.txt").write_text("precious")
    target = tmp_path / "out.json"
    if kind == "hard_link":
        os.link(tmp_path / "user" / "keep.txt", target)
    elif kind == "link_to_dir":
        target.symlink_to(tmp_path / "user", target_is_directory=True)
    elif kind == "dangling":
        target.symlink_to(tmp_path / "user" / "missing.json")
    else:
        target.symlink_to(tmp_path / "user" / "keep.txt")
    files.write_json(target, {"a": 1}, overwrite=True)
    assert not target.is_symlink() and target.read_text() == '{\n  "a": 1\n}\n'
    assert sorted(os.listdir(tmp_path / "user")) == ["keep.txt"]
    assert (tmp_path / "user" / "keep.txt").read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == ["out.json", "user"]


def test_a_node_whose_export_fails_leaves_no_partial_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk after a node's first array: the node is skipped (EXPORT_FAILED) and its folder, which
    the index does not list, used to stay in the export, so the next export --overwrite refused it as
    something dmlshim did not write."""
    import json

    import numpy as np

    from dmlshim.dxdispatch import export as export_module
    from dmlshim.errors import BadInputError

    model = _gather_model(tmp_path, second=True)  # one node exports, the other fails
    inputs = {"x": np.arange(4, dtype=np.float32), "i": np.array([1, -1])}
    real = export_module.export_node

    def disk_full(folder: str, *args: object, **kwargs: object) -> object:
        if "_g" not in folder:  # the second node (h) is exported: the disk was full for g only
            return real(folder, *args, **kwargs)
        directory = args[3]
        assert isinstance(directory, Path)
        (directory / folder).mkdir()
        (directory / folder / "input.npy").write_bytes(b"partial")
        raise BadInputError("cannot write the resource 'indices' sourcePath: No space left on device")

    monkeypatch.setattr(export_module, "export_node", disk_full)
    export_module.export_model(model, tmp_path / "exp", inputs=inputs)
    index = json.loads((tmp_path / "exp" / "index.json").read_text())
    assert [s["code"] for s in index["skipped"]] == ["EXPORT_FAILED"]
    assert sorted(os.listdir(tmp_path / "exp")) == sorted(["index.json", index["exported"][0]["folder"]])
    monkeypatch.setattr(export_module, "export_node", real)
    export_module.export_model(model, tmp_path / "exp", inputs=inputs, overwrite=True)
    index = json.loads((tmp_path / "exp" / "index.json").read_text())
    assert len(index["exported"]) == 2 and index["skipped"] == []
