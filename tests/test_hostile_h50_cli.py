"""Hostile pass h50 (issue 35, item 6), files and commands: names that carry HTML or terminal control
sequences, inspect --inputs with files that do not fit the model, empty paths, the drop-in's summary over
a model the program loaded, hostile DMLSHIM_MEMORY_LIMIT values, a folder holding a 3 GiB run of zeros, a
FIFO and link loops. Values are compared with onnxruntime CPU (one thread)."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz_settings import assert_cli_error, run_cli
from tests.oracle import ort_run


def _gather_model(name: str = "g", prefix: str = "") -> onnx.ModelProto:
    x = helper.make_tensor_value_info(prefix + "x", TensorProto.INT64, ["N"])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), prefix + "W")
    node = helper.make_node(
        "Gather", [prefix + "W", prefix + "x"], [prefix + "y"], name=name, doc_string=name
    )
    out = helper.make_tensor_value_info(prefix + "y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], prefix + "graph", [x], [out], [w], doc_string=name)
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)], doc_string=name
    )


_HTML = "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&\u2028<!--"


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_html_in_every_name_is_escaped(command: str, tmp_path: Path) -> None:
    pytest.importorskip("igraph")
    onnx.save(_gather_model(_HTML + "node", _HTML), tmp_path / "m.onnx")
    res = run_cli(command, "-q", tmp_path / "m.onnx", "--html", tmp_path / "r.html")
    assert res.code == 0, res.err
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # the name is shown, as text


_CONTROL = "a\x1b]0;PWNED\x07\x1b[2J\nFAKE verdict: MATCH\r"


def _with_fallback(name: str) -> onnx.ModelProto:
    """The gather, plus a ScatterElements with a reduction (it falls back: a reason line names it)."""
    model = _gather_model(name + "n", name)
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.zeros((1, 3), np.int64), "ii"),
            numpy_helper.from_array(np.ones((1, 3), np.float32), "uu"),
        ]
    )
    model.graph.node.append(
        helper.make_node("ScatterElements", [name + "W", "ii", "uu"], ["z"], name=name + "s", reduction="mul")
    )
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize("command", ["inspect", "validate", "lower", "export"])
def test_terminal_control_characters_in_names_are_escaped(command: str, tmp_path: Path) -> None:
    """A node or tensor name is printed in tables and sentences: its escape sequences (a terminal title,
    a cleared screen) and carriage return never reach stdout raw, nor does its line break start a line of
    its own (a forged verdict)."""
    onnx.save(_with_fallback(_CONTROL), tmp_path / "m.onnx")
    extra = {"lower": ["-o", tmp_path / "l.onnx"], "export": ["-o", tmp_path / "e"]}.get(command, ["-q"])
    res = run_cli(command, tmp_path / "m.onnx", *extra)
    assert res.code in (0, 1), res.err
    assert "\x1b" not in res.out and "\r" not in res.out and "\x07" not in res.out
    assert "\\x1b]0;PWNED\\x07" in res.out
    assert not any(line.startswith("FAKE") for line in res.out.splitlines()), res.out


def _npz_member(path: Path, name: str, data: bytes) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(name, data)


def _header(shape: tuple[int, ...], descr: str = "<i8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, ("/tmp/dmlshim-h50-pickle-ran", "w"))


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("float32", "expects tensor(int64)"),
        ("rank2", "Invalid rank for input: x"),
        ("missing", "Required inputs (['x']) are missing"),
        ("extra", "Invalid input name: zz"),
        ("strings", "expects tensor(int64)"),
        ("big_endian", ">i8"),
        ("object", "Python objects"),
        ("pickle_member", "not a numpy array"),
        ("huge_shape", "refusing before allocating"),
        ("traversal_name", "Required inputs (['x']) are missing"),
    ],
)
def test_inspect_inputs_that_do_not_fit_the_model_are_refused(case: str, needle: str, tmp_path: Path) -> None:
    """inspect --inputs used to take the shapes of any file when no node input needed a run (a float32
    or a missing feed was reported as 'translated at the shapes of a run'): now checked as run checks it."""
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    npz = tmp_path / "in.npz"
    arrays = {
        "float32": {"x": np.zeros(2, np.float32)},
        "rank2": {"x": np.zeros((2, 2), np.int64)},
        "missing": {"q": np.zeros(2, np.int64)},
        "extra": {"x": np.zeros(2, np.int64), "zz": np.zeros(3)},
        "strings": {"x": np.array(["1", "2"])},
        "big_endian": {"x": np.array([1, 2], ">i8")},
        "object": {"x": np.array([1, "a", None], dtype=object)},
    }
    if case in arrays:
        np.savez(npz, **arrays[case])
    elif case == "pickle_member":
        _npz_member(npz, "x.npy", pickle.dumps(_Evil()))
    elif case == "huge_shape":
        _npz_member(npz, "x.npy", _header((2**40,)))
    else:
        buf = io.BytesIO()
        np.save(buf, np.array([1], np.int64))
        _npz_member(npz, "../../x.npy", buf.getvalue())
    res = run_cli("inspect", "-q", tmp_path / "m.onnx", "--inputs", npz)
    assert_cli_error(res.code, res.err, needle)
    assert not os.path.exists("/tmp/dmlshim-h50-pickle-ran")


def test_inspect_inputs_that_fit_are_still_taken(tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.asfortranarray(np.array([3, -4], np.int64)))
    res = run_cli("inspect", "-q", tmp_path / "m.onnx", "--inputs", tmp_path / "in.npz")
    assert res.code == 0, res.err
    assert "1 of 1 gather/scatter nodes translated at the shapes of a run" in res.out


@pytest.mark.parametrize("size", ["-1", "-0", "1e3", "abc"])
def test_inspect_input_shape_refuses_what_is_not_a_size(size: str, tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    res = run_cli("inspect", "-q", tmp_path / "m.onnx", "--input-shape", f"x={size}")
    assert_cli_error(res.code, res.err, "is not a non-negative integer")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "M", "--inputs", "IN", "-o", ""],
        ["run", "M", "--inputs", ""],
        ["validate", "-q", "M", "--save-outputs", ""],
        ["validate", "-q", "M", "--save-inputs", ""],
        ["validate", "-q", "M", "--reference-outputs", ""],
        ["validate", "-q", "M", "--inputs", ""],
        ["validate", "-q", "M", "--html", ""],
        ["inspect", "-q", "M", "--html", ""],
        ["inspect", "-q", "M", "--inputs", ""],
        ["export", "M", "-o", ""],
    ],
)
def test_an_empty_path_is_a_usage_error(argv: list[str], tmp_path: Path) -> None:
    """``--reference-outputs "$UNSET"`` compared nothing and said MATCH; ``-o ""`` wrote nothing; each
    exited 0. Now argparse refuses the empty path (exit 2)."""
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.array([1], np.int64))
    subst = {"M": tmp_path / "m.onnx", "IN": tmp_path / "in.npz"}
    res = run_cli(*[subst.get(a, a) for a in argv])
    assert res.code == 2, (res.out, res.err)
    assert "the path is empty" in res.err
    assert "Traceback" not in res.err


def _script(folder: Path, model: str) -> Path:
    script = folder / "s.py"
    script.write_text(
        "import os, sys, numpy as np, onnxruntime as ort\n"
        f"s = ort.InferenceSession({model!r}, providers=['DmlExecutionProvider'])\n"
        "print(s.run(None, {'x': np.array([1], np.int64)})[0].tolist())\n"
        "if os.environ.get('H50_RMDIR'):\n"
        "    import shutil; shutil.rmtree(os.environ['H50_RMDIR'])\n"
        "if os.environ.get('H50_CHDIR'):\n"
        "    os.chdir(os.environ['H50_CHDIR'])\n"
    )
    return script


def _dropin(folder: Path, *argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT")}
    return subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", "--summary", "off", *map(str, argv)],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False, env={**clean, **(env or {})},
    )  # fmt: skip


def test_the_summary_never_replaces_a_model_the_program_loaded(tmp_path: Path) -> None:
    """``--summary-file m.onnx --overwrite`` where the script (not its arguments) loads m.onnx: the
    summary replaced the model. Now the sessions' model files are inputs the summary never replaces."""
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    before = (tmp_path / "m.onnx").read_bytes()
    _script(tmp_path, "m.onnx")
    res = _dropin(tmp_path, "--summary-file", "m.onnx", "--overwrite", "s.py")
    assert res.returncode == 0, res.stderr
    assert "refusing to replace an input" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path / "m.onnx").read_bytes() == before
    want = ort_run(tmp_path / "m.onnx", {"x": np.array([1], np.int64)})[0].tolist()
    assert res.stdout.strip() == str(want)


def test_the_summary_never_replaces_the_external_data_of_a_loaded_model(tmp_path: Path) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    model = _gather_model()
    convert_model_to_external_data(model, location="w.bin", size_threshold=0)
    onnx.save(model, tmp_path / "m.onnx")
    before = (tmp_path / "w.bin").read_bytes()
    _script(tmp_path, "m.onnx")
    res = _dropin(tmp_path, "--summary-file", "w.bin", "--overwrite", "s.py")
    assert res.returncode == 0, res.stderr
    assert "the external data of the input model" in res.stderr
    assert (tmp_path / "w.bin").read_bytes() == before


def test_the_summary_folder_removed_during_the_run_is_one_line(tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    _script(tmp_path, "m.onnx")
    (tmp_path / "sub").mkdir()
    res = _dropin(tmp_path, "--summary-file", "sub/s.json", "s.py", env={"H50_RMDIR": str(tmp_path / "sub")})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "does not exist" in res.stderr


def test_the_summary_path_is_fixed_before_the_program_changes_directory(tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    _script(tmp_path, "m.onnx")
    (tmp_path / "elsewhere").mkdir()
    res = _dropin(
        tmp_path, "--summary-file", "s.json", "s.py", env={"H50_CHDIR": str(tmp_path / "elsewhere")}
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "s.json").is_file() and not (tmp_path / "elsewhere" / "s.json").exists()


def test_the_summary_replaces_a_link_never_its_target(tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    _script(tmp_path, "m.onnx")
    (tmp_path / "victim.txt").write_text("victim")
    (tmp_path / "l.json").symlink_to("victim.txt")
    refused = _dropin(tmp_path, "--summary-file", "l.json", "s.py")
    assert refused.returncode == 2 and "pass --overwrite" in refused.stderr
    res = _dropin(tmp_path, "--summary-file", "l.json", "--overwrite", "s.py")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "l.json").is_symlink() and (tmp_path / "victim.txt").read_text() == "victim"


def _cli(
    args: list[object], env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dmlshim", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **env},
    )  # fmt: skip


@pytest.mark.parametrize("value", ["1e3", "1.5e3", "-1", "-0x10", "abc", "inf", "nan", "100B"])
def test_a_malformed_memory_limit_is_refused_before_any_work(value: str, tmp_path: Path) -> None:
    """A guard set wrongly is refused, never read as another limit (-1 was a 0-byte limit refusing every
    tensor; 1e3 was silently ignored): exit 2, one line naming the variable, no output written."""
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros(2000, np.int64))
    res = _cli(["run", "-q", "m.onnx", "--inputs", "in.npz", "-o", "o.npz"], {"DMLSHIM_MEMORY_LIMIT": value},
               tmp_path)  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"DMLSHIM_MEMORY_LIMIT={value!r} is not a size in bytes" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize(("value", "refused"), [(" 100 ", True), ("100000000", False)])
def test_a_memory_limit_is_applied(value: str, refused: bool, tmp_path: Path) -> None:
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros(2000, np.int64))
    res = _cli(["run", "-q", "m.onnx", "--inputs", "in.npz", "-o", "o.npz"], {"DMLSHIM_MEMORY_LIMIT": value},
               tmp_path)  # fmt: skip
    if refused:
        assert res.returncode == 2, res.stderr
        assert "more than the memory limit (100 B, DMLSHIM_MEMORY_LIMIT)" in res.stderr
        return
    assert res.returncode == 0, res.stderr
    got = np.load(tmp_path / "o.npz")["y"]
    np.testing.assert_array_equal(got, ort_run(tmp_path / "m.onnx", {"x": np.zeros(2000, np.int64)})[0])


def _hostile_folder(root: Path) -> Path:
    folder = root / "models"
    (folder / "sub").mkdir(parents=True)
    onnx.save(_gather_model(), folder / "a.onnx")
    onnx.save(_gather_model(), folder / "sub" / "b.onnx")
    (folder / "sub" / "loop").symlink_to("..")
    (folder / "self").symlink_to(".")
    os.mkfifo(folder / "pipe.onnx")
    (folder / "dangling.onnx").symlink_to("nowhere.onnx")
    (folder / "zero.onnx").symlink_to("/dev/zero")
    with open(folder / "huge.onnx", "wb") as f:  # sparse: 3 GiB of zeros on no disk
        f.truncate(3 << 30)
    return folder


def test_validate_a_hostile_folder_finishes(tmp_path: Path) -> None:
    """A 3 GiB file of zeros was walked two bytes a field (field 0 is no protobuf field): validate hung.
    With a 100 MB limit it is refused before onnx reads it whole (it took 3.2 GB); the FIFO, the device
    link, the dangling link and the link loops are not followed; the two real models match."""
    folder = _hostile_folder(tmp_path)
    res = _cli(["validate", "-q", folder], {"DMLSHIM_MEMORY_LIMIT": str(100_000_000)}, tmp_path, timeout=240)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert "reading the model file whole (huge.onnx) would need 3.00 GiB" in res.stdout
    assert "2 match, 0 mismatch, 1 error, 0 crash of 3 models" in res.stdout


def test_an_error_of_the_users_prints_no_stray_onnxruntime_error(tmp_path: Path) -> None:
    """dmlshim asks onnxruntime its check-failure class by running a GatherElements out of range; that
    run's error line used to print beside the user's own, unrelated error."""
    weight = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 3])
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="missing.bin")
    model = _gather_model()
    model.graph.initializer[0].CopyFrom(weight)
    onnx.save(model, tmp_path / "m.onnx")
    res = subprocess.run(
        [sys.executable, "-c", "import dmlshim\ntry:\n    dmlshim.InferenceSession('m.onnx')\n"
         "except Exception as e:\n    print(type(e).__name__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.stdout.strip() == "BadModelError", res.stderr
    assert "GatherElements" not in res.stderr, res.stderr


def test_the_summary_keeps_a_file_the_program_wrote_through_a_key_value_argument(tmp_path: Path) -> None:
    """``s.py --out=res.json``: the argument is not a path, so the summary is not refused at the start;
    the program's file, appeared during the run, is kept at exit."""
    onnx.save(_gather_model(), tmp_path / "m.onnx")
    (tmp_path / "s.py").write_text(
        "import sys, onnxruntime as ort\n"
        "ort.InferenceSession('m.onnx', providers=['DmlExecutionProvider'])\n"
        "open(sys.argv[1].split('=', 1)[1], 'w').write('program result')\n"
    )
    res = _dropin(tmp_path, "--summary-file", "res.json", "s.py", "--out=res.json")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "res.json").read_text() == "program result"
    assert "Traceback" not in res.stderr
