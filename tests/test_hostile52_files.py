"""Hostile round 52, files and sessions: paths the system cannot open as files (a name past the file
system's 255-byte limit, a file named as a folder), profile names no file can have, and Ctrl-C while the
command imports onnxruntime. Each case is asked of onnxruntime (CPU, one thread) in the same test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.cli.main import main

PROVIDER = str(Path(__file__).resolve().parents[1] / "provider")
LONG = "\u00e9" * 130  # 260 bytes in UTF-8: past the 255-byte limit of a name on every common file system
FEED = {"i": np.array([1, 2], dtype=np.int64)}


def _model(folder: Path) -> Path:
    """``folder/m.onnx``: z = Relu(Gather(w[64, 4], i)) on axis 0, its weight inline."""
    w = numpy_helper.from_array(np.arange(256, dtype=np.float32).reshape(64, 4), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="g"),
            helper.make_node("Relu", ["y"], ["z"], name="r"),
        ],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 4])],
        [w],
    )
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _ort_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def _ort_error(path: str, so: ort.SessionOptions | None = None) -> BaseException:
    with pytest.raises(Exception) as caught:
        ort.InferenceSession(path, so or _ort_options(), providers=["CPUExecutionProvider"])
    return caught.value


@pytest.mark.parametrize("tail", ["/", "/.", "/x.onnx"], ids=["slash", "slash-dot", "under-a-file"])
def test_a_model_file_named_as_a_folder_is_refused_as_onnxruntime_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    """``m.onnx/``: onnxruntime opens the name as given and fails (``Fail``, system error 20, not a
    directory); ``Path()`` dropped the separator and dmlshim loaded ``m.onnx``."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    name = "m.onnx" + tail
    expected = _ort_error(name)
    assert type(expected).__name__ == "Fail"
    with pytest.raises(type(expected)) as got:
        dmlshim.InferenceSession(name)
    assert str(got.value).startswith(str(expected))
    assert isinstance(got.value, dmlshim.DmlShimError)


def test_a_model_path_too_long_is_onnxruntimes_fail_not_an_oserror(tmp_path: Path) -> None:
    """A name past the file system's limit: onnxruntime's ``Fail`` (system error 36); dmlshim raised the
    bare ``OSError`` of ``Path.is_file()``."""
    name = str(tmp_path / f"{LONG}.onnx")
    expected = _ort_error(name)
    with pytest.raises(type(expected)) as got:
        dmlshim.InferenceSession(name)
    assert str(got.value).startswith(str(expected))


def test_an_optimized_model_path_too_long_is_a_runtime_error_as_in_onnxruntime(tmp_path: Path) -> None:
    """onnxruntime cannot create the file (``RuntimeError``, ``SystemError : 36``); dmlshim's check raised
    the bare ``OSError`` of ``os.lstat``. Nothing is written in either."""
    model = _model(tmp_path)
    so = _ort_options()
    so.optimized_model_filepath = str(tmp_path / f"{LONG}.onnx")
    expected = _ort_error(str(model), so)
    assert isinstance(expected, RuntimeError)
    ours = dmlshim.SessionOptions()
    ours.optimized_model_filepath = so.optimized_model_filepath
    with pytest.raises(RuntimeError) as got:
        dmlshim.InferenceSession(str(model), ours)
    assert isinstance(got.value, dmlshim.DmlShimError)
    assert "File name too long" in str(got.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("prefix", [LONG], ids=["too-long"])
def test_a_profile_name_no_file_can_have_ends_as_in_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    """onnxruntime builds the session, runs it and returns the profile's name from ``end_profiling``
    without a file when it cannot open one (a name too long); dmlshim's session raised ``OSError`` (or
    ``ValueError`` for a NUL) when it was built. A NUL is refused when the session is built
    (``tests/test_nul_paths53.py``): onnxruntime writes the file named by the prefix's start then."""
    monkeypatch.chdir(tmp_path)
    model = _model(tmp_path)
    (tmp_path / "p").write_text("the user's file")
    names = []
    for make in (lambda so: ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]),):
        so = _ort_options()
        so.enable_profiling, so.profile_file_prefix = True, prefix
        session = make(so)
        expected = session.run(None, FEED)
        names.append(session.end_profiling())
    (tmp_path / "p").write_text("the user's file")
    so = dmlshim.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, prefix
    session = dmlshim.InferenceSession(str(model), so)
    np.testing.assert_array_equal(session.run(None, FEED)[0], expected[0])
    name = session.end_profiling()
    assert name.startswith(prefix + "_") and name.endswith(".json")
    assert names[0].startswith(prefix + "_")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "p"]
    assert (tmp_path / "p").read_text() == "the user's file"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "m.onnx", "-o", f"{LONG}.npz"],
        ["run", "m.onnx", "-o", f"{LONG}.npz", "--overwrite"],
        ["lower", "m.onnx", "-o", f"{LONG}.onnx"],
        ["inspect", "m.onnx", "--html", f"{LONG}.html"],
        ["export", "m.onnx", "-o", LONG * 2],
        ["run", "m.onnx", "--inputs", f"{LONG}.npz"],
        ["run", f"{LONG}.onnx"],
        ["inspect", "m.onnx/"],
    ],
    ids=["run-o", "run-o-overwrite", "lower-o", "inspect-html", "export-o", "run-inputs", "model", "slash"],
)
def test_a_path_the_system_cannot_open_is_one_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Every command: exit 2 and one line naming the file and the system's reason. Before: the OSError
    reached the command's last handler, which read attributes only dmlshim's errors have
    (``AttributeError: 'OSError' object has no attribute 'path'``, a traceback, exit 1)."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(f"dmlshim {argv[0]}: error: file ")
    assert ("File name too long" in err) or ("Not a directory" in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_the_command_imports_onnxruntime_while_ctrl_c_still_ends_it_at_once(tmp_path: Path) -> None:
    """onnxruntime's extension module clears a KeyboardInterrupt raised while it initialises: the import
    succeeds, and a Ctrl-C pressed then was lost (``dmlshim export`` ran to its end, exit 0, in 3 of 24
    tries at 0.2-0.45 s). The command now imports onnxruntime before it hands SIGINT back to Python, while
    Ctrl-C still ends the starting command at once (exit 130)."""
    _model(tmp_path)
    code = """
        import signal, sys
        import dmlshim.cli.main as cli
        from dmlshim import startup
        handed_back = []
        def interrupts_raise():
            handed_back.append("onnxruntime" in sys.modules)
            startup.interrupts_raise()
        cli.interrupts_raise = interrupts_raise
        code = cli.main(["export", "m.onnx", "-o", "out"])
        print(handed_back, code)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PROVIDER},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[True] 0"


def test_optimized_weights_named_as_the_optimized_model_are_refused_before_writing(tmp_path: Path) -> None:
    """``session.optimized_model_external_initializers_file_name`` naming the optimized model's own file:
    onnxruntime writes both to that name, the weights last, so what it leaves is no model at all; dmlshim
    wrote the model over the weights (a model whose external weights are gone). Refused before either is
    written; the file there before is kept."""
    model = _model(tmp_path)
    key = "session.optimized_model_external_initializers_file_name"
    so = _ort_options()
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    so.add_session_config_entry(key, "ort.onnx")
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    # onnxruntime's own output: the weights' bytes written over the model's, no model any more
    state = ort.capi.onnxruntime_pybind11_state
    with pytest.raises((state.InvalidProtobuf, state.Fail, state.InvalidGraph)):
        ort.InferenceSession(str(tmp_path / "ort.onnx"), _ort_options(), providers=["CPUExecutionProvider"])
    target = tmp_path / "o.onnx"
    target.write_bytes(b"an earlier optimized model")
    for name in ("o.onnx", "./o.onnx"):
        ours = dmlshim.SessionOptions()
        ours.optimized_model_filepath = str(target)
        ours.add_session_config_entry(key, name)
        with pytest.raises(RuntimeError, match="name the optimized model itself"):
            dmlshim.InferenceSession(str(model), ours)
        assert target.read_bytes() == b"an earlier optimized model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "ort.onnx"]


def test_a_summary_file_too_long_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    """``DMLSHIM_ORT_SUMMARY_FILE`` (or ``install(summary_file=...)``) too long for the file system: one
    line and exit 2 before the program runs, as for a missing folder (before: the ``OSError`` of
    ``os.lstat``, a traceback)."""
    (tmp_path / "prog.py").write_text("print('the program ran')\n")
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "prog.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PROVIDER, "DMLSHIM_ORT_SUMMARY_FILE": f"{LONG}.json"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "File name too long" in done.stderr
    assert "the program ran" not in done.stdout
    with pytest.raises(dmlshim.BadInputError, match="File name too long"):
        dmlshim.install(summary_file=str(tmp_path / f"{LONG}.json"))
    assert sys.modules["onnxruntime"] is ort  # nothing was bound
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py"]


@pytest.mark.parametrize("text", ['{"name": "my-site", "pages": 3}\n', "not JSON at all\n", "[1, 2]\n"])
def test_export_overwrite_never_replaces_an_index_json_it_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """``export -o DIR --overwrite`` into a folder holding someone else's ``index.json`` (a web project's):
    the index was counted as a previous export's whatever it held, and replaced. Only an index naming
    ``"tool": "dmlshim export"`` is; this one is kept and the export refused (exit 2), the folder as it
    was."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.json").write_text(text)
    assert main(["export", "m.onnx", "-o", "site", "--overwrite"]) == 2
    assert "index.json" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "site").iterdir()] == ["index.json"]
    assert (tmp_path / "site" / "index.json").read_text() == text
    # a previous export's own index is still replaced, with the node folders it lists
    assert main(["export", "m.onnx", "-o", "out"]) == 0
    assert main(["export", "m.onnx", "-o", "out", "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["000_g", "index.json"]


def test_a_failed_export_removes_the_folders_it_made_on_the_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export -o new/..``: the missing folder ``new`` was made for the staging folder, the final rename
    failed (a folder's ``..`` cannot be replaced), and ``new`` stayed behind."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    assert main(["export", "m.onnx", "-o", "new/deeper/..", "--overwrite"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_session_built_while_another_probes_the_shared_options_writes_its_optimized_model(
    tmp_path: Path,
) -> None:
    """dmlshim switches the caller's own profiling and ``optimized_model_filepath`` off for a moment while
    it builds a probe session from them (free dimension overrides, added initializers). A session built
    on another thread from the same options object meanwhile read them off: no optimized model, no error
    (2 of 4 threads building from one object). onnxruntime reads the options once per session; every
    session writes the file. The probe's change now holds the object, and a session waits for it."""
    import threading

    from dmlshim.ort.free_dims import _writing_nothing

    model = _model(tmp_path)
    so = dmlshim.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "o.onnx")
    probing, release = threading.Event(), threading.Event()

    def another_sessions_probe() -> None:
        with _writing_nothing(so):
            probing.set()
            release.wait(60)

    probe = threading.Thread(target=another_sessions_probe)
    probe.start()
    assert probing.wait(60)
    built: list[BaseException | None] = []

    def build() -> None:
        try:
            dmlshim.InferenceSession(str(model), so)
            built.append(None)
        except BaseException as exc:  # handed to the test thread
            built.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    builder.join(1.0)  # waits for the probe's change to end (before: built at once, reading it off)
    release.set()
    builder.join(120)
    probe.join(60)
    assert built == [None]
    assert so.optimized_model_filepath == str(tmp_path / "o.onnx")
    assert (tmp_path / "o.onnx").is_file()


def test_sessions_built_on_threads_from_one_options_object_each_write_as_onnxruntime(tmp_path: Path) -> None:
    """Four threads, one options object with ``optimized_model_filepath`` and profiling, a model with a
    free dimension (its overrides are probed from the caller's object): each session, as each of
    onnxruntime's, has written the optimized model when it is built, and profiles."""
    from concurrent.futures import ThreadPoolExecutor

    model = _model(tmp_path)
    results = {}
    for name, make in (
        ("ort", lambda so: ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])),
        ("dmlshim", lambda so: dmlshim.InferenceSession(str(model), so)),
    ):
        so = _ort_options() if name == "ort" else dmlshim.SessionOptions()
        target = tmp_path / f"{name}.onnx"
        so.optimized_model_filepath = str(target)
        so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / f"{name}_profile")
        so.add_free_dimension_override_by_name("unused", 1)

        def build(_: int, so: ort.SessionOptions = so, target: Path = target, make=make) -> tuple[bool, bool]:
            session = make(so)
            written = target.is_file()
            session.run(None, FEED)
            return written, bool(session.end_profiling())

        with ThreadPoolExecutor(4) as pool:
            results[name] = list(pool.map(build, range(4)))
    assert results["ort"] == [(True, True)] * 4
    assert results["dmlshim"] == results["ort"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE: POSIX")
def test_lower_past_the_file_size_limit_names_the_output_not_the_input(tmp_path: Path) -> None:
    """A full disk simulated by ``RLIMIT_FSIZE``: ``lower`` copies the weights to its output a chunk at a
    time and said ``cannot read the weights file: File too large`` naming the input model; the failure
    is the output's. The old output is kept and no temporary file is left."""
    import resource

    w = numpy_helper.from_array(np.arange(1_200_000, dtype=np.float32).reshape(300_000, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
        [w],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10),
        tmp_path / "m.onnx",
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "l.onnx").write_bytes(b"the previous lowered model")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "lower", "m.onnx", "-o", "out/l.onnx", "--overwrite"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PROVIDER},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limited,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "file 'out/l.onnx': cannot write the output file: File too large" in done.stderr
    assert "weights file" not in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["l.onnx"]
    assert (tmp_path / "out" / "l.onnx").read_bytes() == b"the previous lowered model"


def test_the_dropin_runs_a_linked_script_with_its_real_folder_first_as_python(tmp_path: Path) -> None:
    """A script linked into a ``bin`` folder imports the modules beside its real file: python puts that
    folder first on ``sys.path``; the drop-in put the link's folder there (``ModuleNotFoundError``)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "app" / "helper_mod.py").write_text("VALUE = 42\n")
    (tmp_path / "app" / "tool.py").write_text(
        "import sys, helper_mod\nprint(helper_mod.VALUE, sys.path[0], __file__, sys.argv[1:])\n"
    )
    os.symlink(os.path.join("..", "app", "tool.py"), tmp_path / "bin" / "tool")
    outputs = []
    for runner in ([], ["-m", "dmlshim.ort", "--summary", "off"]):
        done = subprocess.run(
            [sys.executable, *runner, os.path.join("bin", "tool"), "x"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": PROVIDER},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[1] == outputs[0]
    assert outputs[0].startswith(f"42 {os.path.realpath(tmp_path / 'app')} ")


@pytest.mark.parametrize("form", ["script", "module", "folder", "stdin"])
def test_the_dropin_gives_the_program_builtins_as_python_gives_its_main_module(
    tmp_path: Path, form: str
) -> None:
    """python's ``__main__`` holds ``__builtins__`` as the ``builtins`` module; the drop-in ran the program
    in runpy's fresh globals, where it is the module's dict (``__builtins__.len`` raised AttributeError)."""
    code = "print(type(__builtins__).__name__, __builtins__.len('abc'))\n"
    (tmp_path / "prog.py").write_text(code)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "__main__.py").write_text(code)
    args = {"script": ["prog.py"], "module": ["-m", "prog"], "folder": ["folder"], "stdin": ["-"]}[form]
    outputs = []
    for runner in ([], ["-m", "dmlshim.ort", "--summary", "off"]):
        done = subprocess.run(
            [sys.executable, *runner, *args],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": PROVIDER},
            input=code,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip())
    assert outputs == ["module 3", "module 3"]


def test_a_state_the_environment_names_that_no_dmlshim_made_is_not_taken(tmp_path: Path) -> None:
    """``DMLSHIM_ORT_OWNER`` and ``DMLSHIM_ORT_STATE`` left in a copied environment, naming a folder of the
    user's: the drop-in took itself for a worker of a process long gone, printed no summary, ignored
    ``$DMLSHIM_ORT_SUMMARY_FILE`` and wrote its tally (``<pid>.json``) into the user's folder. It now
    owns the run."""
    _model(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    (tmp_path / "prog.py").write_text(
        "import numpy as np, onnxruntime as ort\n"
        "s = ort.InferenceSession('m.onnx')\n"
        "print(s.run(None, {'i': np.array([1, 2])})[0].tolist())\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": PROVIDER,
        "DMLSHIM_ORT_OWNER": "1",
        "DMLSHIM_ORT_STATE": str(mine),
        "DMLSHIM_ORT_SUMMARY_FILE": "summary.json",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "prog.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]"
    assert "1 session(s), 1 run(s)" in done.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (tmp_path / "summary.json").is_file()


@pytest.mark.parametrize("name", ["loop", os.path.join("loop", "m.onnx")])
def test_a_model_path_through_a_loop_of_links_is_onnxruntimes_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A link to itself: onnxruntime's ``Fail`` (system error 40, too many levels of links); dmlshim
    said the file does not exist (``NoSuchFile``)."""
    monkeypatch.chdir(tmp_path)
    os.symlink("loop", tmp_path / "loop")
    expected = _ort_error(name)
    with pytest.raises(type(expected)) as got:
        dmlshim.InferenceSession(name)
    assert str(got.value).startswith(str(expected))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX")
def test_a_child_forked_while_a_thread_holds_the_options_builds_its_session(tmp_path: Path) -> None:
    """A thread of the parent holds the shared options (building a session from them) when the main thread
    forks a worker: the child builds its own session from the same object instead of waiting forever for a
    lock whose holder does not exist in it."""
    _model(tmp_path)
    code = """
        import os, sys, threading
        import numpy as np
        import dmlshim
        from dmlshim.runtime.real import options_held
        so = dmlshim.SessionOptions()
        so.optimized_model_filepath = "parent.onnx"
        holding, release = threading.Event(), threading.Event()
        def hold():
            with options_held(so):
                holding.set()
                release.wait(60)
        thread = threading.Thread(target=hold)
        thread.start()
        holding.wait(60)
        pid = os.fork()
        if pid == 0:
            so.optimized_model_filepath = "child.onnx"
            session = dmlshim.InferenceSession("m.onnx", so)
            value = session.run(None, {"i": np.array([1])})[0].tolist()
            print("child", value, os.path.isfile("child.onnx"), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        release.set()
        thread.join()
        print("parent", os.waitstatus_to_exitcode(status), flush=True)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PROVIDER},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["child [[4.0, 5.0, 6.0, 7.0]] True", "parent 0"]


@pytest.mark.parametrize(
    "source",
    [
        b"# -*- coding: latin-1 -*-\nprint(ascii('caf\xe9'), __file__)\n",
        b"\xef\xbb\xbfprint(ascii('caf\xc3\xa9'), __file__)\n",
    ],
    ids=["coding-latin-1", "utf-8-bom"],
)
def test_a_program_on_standard_input_is_read_as_python_reads_it(tmp_path: Path, source: bytes) -> None:
    """``python -`` compiles the bytes it reads: a coding declaration and a UTF-8 BOM hold. The drop-in
    decoded standard input with the locale's codec: a latin-1 program ended in UnicodeEncodeError, a BOM
    in ``SyntaxError: invalid non-printable character U+FEFF``; ``__file__`` was missing."""
    (tmp_path / "prog.py").write_bytes(source)
    outputs = []
    for runner in ([], ["-m", "dmlshim.ort", "--summary", "off"]):
        with open(tmp_path / "prog.py", "rb") as stdin:  # python - < prog.py
            done = subprocess.run(
                [sys.executable, *runner, "-"],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": PROVIDER},
                stdin=stdin,
                capture_output=True,
                timeout=300,
            )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        outputs.append(done.stdout.decode().strip())
    assert outputs == ["'caf\\xe9' <stdin>"] * 2


@pytest.mark.parametrize("target", [os.path.join("afile", "out"), os.path.join("afile", "deeper", "out")])
def test_an_export_folder_under_a_regular_file_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """``export -o afile/out``, ``afile`` a regular file: named as ``run -o afile/x.npz`` names it, before
    the work (it said ``cannot create the export directory: File exists`` once the nodes were exported)."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    (tmp_path / "afile").write_text("mine")
    assert main(["export", "m.onnx", "-o", target]) == 2
    assert "the export directory's folder 'afile' is not a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "m.onnx"]
    assert (tmp_path / "afile").read_text() == "mine"
