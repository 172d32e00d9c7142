"""Hostile pass h6 (issue 35): the drop-in binding and the commands' output paths. What onnxruntime
accepts dmlshim accepts with onnxruntime's values; what onnxruntime refuses dmlshim refuses with an error
of onnxruntime's class. Each expected value or refusal is asked of onnxruntime CPU in the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadInputError
from tests.oracle import ort_session

ENGINES = ("partitioned", "customop", "cpu")
F, I64 = TensorProto.FLOAT, TensorProto.INT64
MODELS = Path(__file__).resolve().parents[1] / "onnx_models"


def _model(op: str, inputs: list[str], **attrs) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["o"], name="n", **attrs)],
        "h6",
        [helper.make_tensor_value_info(n, F if n != "i" else I64, None) for n in inputs],
        [helper.make_tensor_value_info("o", F, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


_RANK0 = [
    ("GatherND", ["d", "i"], {"i": np.zeros((1, 0), np.int64)}),
    ("GatherND", ["d", "i"], {"i": np.zeros((3, 0), np.int64)}),
]


@pytest.mark.parametrize(("op", "inputs", "feeds"), _RANK0)
@pytest.mark.parametrize("engine", ENGINES)
def test_rank0_data_with_empty_index_tuples_follows_onnxruntime(
    op: str, inputs: list[str], feeds: dict, engine: str
) -> None:
    """A GatherND of a scalar with index tuples of length 0, inputs of undeclared rank: onnxruntime runs
    it ([1.] per tuple); dmlshim's single-node fallback declared the rank and onnxruntime's shape
    inference refused it at load."""
    model = _model(op, inputs)
    feeds = {"d": np.array(1.5, np.float32), **feeds}
    want = ort_session(model).run(None, feeds)
    got = dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
    assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])


def _bound(sess, indices: np.ndarray):
    binding = sess.io_binding()
    binding.bind_cpu_input("d", np.arange(12, dtype=np.float32).reshape(4, 3))
    binding.bind_cpu_input("i", indices)
    binding.bind_output("o")
    return binding


@pytest.mark.parametrize("engine", ENGINES)
def test_output_bound_by_name_keeps_its_first_shape_as_in_onnxruntime(engine: str) -> None:
    """onnxruntime (1.24 and 1.32) keeps the output its first run allocated for bind_output(name) as
    pre-allocated memory: a later run of another output shape fails until the output is bound again."""
    model = _model("Gather", ["d", "i"])
    results = []
    for sess in (ort_session(model), dmlshim.InferenceSession(model, engine=engine)):
        binding = _bound(sess, np.array([0, 1]))
        sess.run_with_iobinding(binding)
        binding.bind_cpu_input("i", np.array([3, 2]))
        sess.run_with_iobinding(binding)  # the same shape: fine
        same = binding.copy_outputs_to_cpu()[0]
        binding.bind_cpu_input("i", np.array([0, 1, 2, 3]))
        with pytest.raises(RuntimeError) as info:
            sess.run_with_iobinding(binding)
        binding.bind_output("o")  # bound again: any shape
        sess.run_with_iobinding(binding)
        again = binding.copy_outputs_to_cpu()[0]
        binding.clear_binding_outputs()
        binding.bind_output("o")
        binding.bind_cpu_input("i", np.array([1]))
        sess.run_with_iobinding(binding)
        results.append((same, again, binding.copy_outputs_to_cpu()[0], info.value))
    (theirs_same, theirs_again, theirs_last, _), (same, again, last, error) = results
    np.testing.assert_array_equal(same, theirs_same)
    np.testing.assert_array_equal(again, theirs_again)
    np.testing.assert_array_equal(last, theirs_last)
    assert isinstance(error, BadInputError) and error.tensor == "o"
    assert "[4, 3]" in str(error) and "[2, 3]" in str(error)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dmlshim", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize(
    ("link", "target", "command"),
    [
        ("out.npz", "/proc/self/fd/1", "run"),  # what /dev/stdout points to
        ("out.npz", "/dev/null", "run"),
        ("out.npz", "fifo", "run"),
        ("out.onnx", "/dev/null", "lower"),
        ("exp", "/proc/self/fd", "export"),  # what /dev/fd points to
    ],
)
def test_overwrite_never_replaces_a_link_standing_for_a_stream_or_device(
    link: str, target: str, command: str, tmp_path: Path
) -> None:
    """``-o /dev/stdout --overwrite`` (as root) would have replaced the system's /dev/stdout link by a
    regular file; any link to a process's open file, a device or a FIFO is refused, and stays."""
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
    os.symlink(target, tmp_path / link)
    model = str(MODELS / "embedding_gather.onnx")
    args = {
        "run": ["run", model, "--inputs", str(MODELS / "embedding_gather.npz"), "-o", link],
        "lower": ["lower", model, "-o", link],
        "export": ["export", model, "-o", link],
    }[command]
    done = _run([*args, "--overwrite", "-q"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "does not replace such a link" in done.stderr, done.stderr
    assert os.readlink(tmp_path / link) == target


def test_overwrite_still_replaces_a_link_to_a_regular_file_or_a_dangling_one(tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("keep")
    os.symlink("target.txt", tmp_path / "a.npz")
    os.symlink("missing", tmp_path / "b.npz")
    for name in ("a.npz", "b.npz"):
        done = _run(
            ["run", str(MODELS / "embedding_gather.onnx"), "--inputs", str(MODELS / "embedding_gather.npz"),
             "-o", name, "--overwrite", "-q"],
            tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert not (tmp_path / name).is_symlink()
        assert list(np.load(tmp_path / name)) == [
            o.name for o in onnx.load(MODELS / "embedding_gather.onnx").graph.output
        ]
    assert (tmp_path / "target.txt").read_text() == "keep"


def _python(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, input=stdin, timeout=600)


@pytest.mark.parametrize("form", ["folder", "zip", "stdin", "empty folder"])
def test_dmlshim_ort_runs_what_python_runs(form: str, tmp_path: Path) -> None:
    """``python -m dmlshim.ort X`` runs X as ``python X`` does: a folder or zip archive with a __main__
    module, ``-`` (the program on standard input); a folder without __main__ fails as python fails."""
    import zipfile

    body = (
        "import sys, onnxruntime\n"
        "print(sys.argv[1:], __name__, onnxruntime.InferenceSession.__name__)\n"
        "raise SystemExit(4)\n"
    )
    (tmp_path / "app").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(body)
    with zipfile.ZipFile(tmp_path / "app.pyz", "w") as archive:
        archive.writestr("__main__.py", body)
    target, stdin = {"folder": ("app", None), "zip": ("app.pyz", None), "stdin": ("-", body)}.get(
        form, ("empty", None)
    )
    theirs = _python([target, "a"], tmp_path, stdin)
    ours = _python(["-m", "dmlshim.ort", "--summary", "off", target, "a"], tmp_path, stdin)
    assert ours.returncode == theirs.returncode == (1 if form == "empty folder" else 4), ours.stderr
    assert ours.stdout == theirs.stdout
    if form == "empty folder":
        assert ours.stderr == theirs.stderr and "can't find '__main__' module" in ours.stderr
    else:
        assert ours.stdout == "['a'] __main__ InferenceSession\n"


@pytest.mark.parametrize("command", ["validate", "run", "inspect", "export"])
def test_negative_seed_is_a_usage_error_not_a_traceback(command: str, tmp_path: Path) -> None:
    """``--seed -1`` ended in numpy's traceback with exit status 1 (validate's 'mismatch')."""
    args = [command, str(MODELS / "embedding_gather.onnx"), "--seed", "-1", "-q"]
    if command in ("run", "export"):
        args += ["-o", "out"]
    done = _run(args, tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("argument --seed: must be a whole number >= 0: '-1'")


def test_empty_model_path_is_onnxruntimes_type_error() -> None:
    """onnxruntime fails in its constructor (TypeError) for ``InferenceSession("")``; dmlshim read it as
    the folder '.' ("not a regular file [file '.']")."""
    with pytest.raises(TypeError) as theirs:
        onnxruntime.InferenceSession("", providers=["CPUExecutionProvider"])
    with pytest.raises(TypeError) as ours:
        dmlshim.InferenceSession("")
    assert isinstance(ours.value, type(theirs.value)) and isinstance(ours.value, dmlshim.BadModelError)
    assert "the model path is empty" in str(ours.value)


def _gather_session(module) -> Any:
    model = _model("Gather", ["d", "i"])
    if module is onnxruntime:
        return ort_session(model)
    return dmlshim.InferenceSession(model)


_FEEDS = {"d": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([1, -1])}


def _gen():
    yield "o"


_NAMES = {
    "dict": lambda: {"o": 1},  # onnxruntime's TypeError (dmlshim ran it)
    "OrderedDict": lambda: __import__("collections").OrderedDict(o=1),
    "list_iterator": lambda: iter(["o"]),  # an iterator that is no generator: TypeError
    "mappingproxy": lambda: __import__("types").MappingProxyType({"o": 1}),
    "keys": lambda: {"o": 1}.keys(),  # accepted by both
    "frozenset": lambda: frozenset(["o"]),
    "ndarray": lambda: np.array(["o"]),
    "generator": _gen,
}


@pytest.mark.parametrize("kind", sorted(_NAMES))
def test_output_names_containers_as_onnxruntime_takes_them(kind: str) -> None:
    try:
        theirs: Any = _gather_session(onnxruntime).run(_NAMES[kind](), _FEEDS)
    except Exception as exc:
        theirs = exc
    if isinstance(theirs, Exception):
        assert isinstance(theirs, TypeError)
        with pytest.raises(TypeError) as ours:
            _gather_session(dmlshim).run(_NAMES[kind](), _FEEDS)
        assert isinstance(ours.value, BadInputError)
    else:
        np.testing.assert_array_equal(_gather_session(dmlshim).run(_NAMES[kind](), _FEEDS)[0], theirs[0])


@pytest.mark.parametrize("feeds", [None, [("i", np.array([1]))], ("i",), 3])
def test_input_feed_that_is_no_mapping_is_onnxruntimes_attribute_error(feeds: Any) -> None:
    with pytest.raises(AttributeError) as theirs:
        _gather_session(onnxruntime).run(None, feeds)
    with pytest.raises(AttributeError) as ours:
        _gather_session(dmlshim).run(None, feeds)
    assert isinstance(ours.value, BadInputError)
    assert str(ours.value).startswith(str(theirs.value))


@pytest.mark.parametrize("dtype", ["datetime64[s]", "m8[ms]", "complex64", "complex128", "longdouble"])
def test_feed_of_a_numpy_type_onnx_lacks_is_onnxruntimes_runtime_error(dtype: str) -> None:
    feeds = {"d": _FEEDS["d"], "i": np.zeros(2, dtype=dtype)}
    with pytest.raises(RuntimeError) as theirs:
        _gather_session(onnxruntime).run(None, feeds)
    with pytest.raises(RuntimeError) as ours:
        _gather_session(dmlshim).run(None, feeds)
    assert isinstance(ours.value, BadInputError) and ours.value.tensor == "i"
    assert not isinstance(ours.value, onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument)
    assert str(ours.value).startswith(str(theirs.value).rstrip("."))


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{model}", "-o", "-"],
        ["export", "{model}", "-o", "-"],
        ["lower", "{model}", "-o", "-"],
        ["inspect", "{model}", "--html", "-"],
    ],
)
def test_dash_as_an_output_is_a_usage_error_not_a_file_named_dash(args: list[str], tmp_path: Path) -> None:
    """``-o -`` reads as standard output to anyone used to Unix tools; none of these outputs can go there,
    so it is refused (exit 2) instead of writing a file called ``-``; ``./-`` still names that file."""
    model = str(MODELS / "embedding_gather.onnx")
    done = _run([a.replace("{model}", model) for a in args], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "'-' (standard output) is not supported" in done.stderr and "./-" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "-").exists()
    written = _run(["run", model, "-o", "./-"], tmp_path)
    assert written.returncode == 0, written.stderr
    with np.load(tmp_path / "-") as z:
        assert len(z.files) == 1
