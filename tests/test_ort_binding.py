"""dmlshim bound in place of onnxruntime for programs that do not import it: the two binding forms (the
class patched, the module replaced), ``python -m dmlshim.ort`` on an unmodified script and its worker
processes, and the summary at exit. Expected values come from the real onnxruntime running the same
script (tests/ort_clients/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from .conftest import REPO

CLIENTS = Path(__file__).resolve().parent / "ort_clients"
MODEL = REPO / "onnx_models" / "embedding_gather.onnx"
FEEDS = REPO / "onnx_models" / "embedding_gather.npz"
SCATTER_MODEL = REPO / "onnx_models" / "scatternd_kv_cache.onnx"
SCATTER_FEEDS = REPO / "onnx_models" / "scatternd_kv_cache.npz"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    return env


def _python(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _script(tmp_path: Path, name: str, model: Path, feeds: Path, prologue: str = "") -> dict[str, Any]:
    """Run tests/ort_clients/<name> (after ``prologue``, in the same process) and read what it wrote."""
    out = tmp_path / f"{name}.{abs(hash(prologue))}.json"
    runner = tmp_path / f"run_{abs(hash(prologue))}.py"
    runner.write_text(
        textwrap.dedent(prologue)
        + "\nimport runpy, sys\n"
        + f"sys.argv = [{str(CLIENTS / name)!r}, {str(model)!r}, {str(feeds)!r}, {str(out)!r}]\n"
        + f"runpy.run_path({str(CLIENTS / name)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    _python([str(runner)], tmp_path)
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _script(tmp_path_factory.mktemp("theirs"), "typical_script.py", MODEL, FEEDS)


def _same_results(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["outputs"].keys() == theirs["outputs"].keys()
    for name, value in theirs["outputs"].items():
        np.testing.assert_array_equal(np.asarray(ours["outputs"][name]), np.asarray(value), err_msg=name)
    assert (
        ours["errors"]
        == theirs["errors"]
        == {
            "wrong_dtype": "InvalidArgument",
            "missing_file": "NoSuchFile",
            "bind_unknown": "RuntimeError",
            "unbound_input": "RuntimeError",
        }
    )
    assert ours["version"] == theirs["version"] == onnxruntime.__version__
    assert ours["model_path"] == theirs["model_path"] == str(MODEL)


def test_the_class_patched(tmp_path: Path, theirs: dict[str, Any]) -> None:
    ours = _script(
        tmp_path,
        "typical_script.py",
        MODEL,
        FEEDS,
        """
        import onnxruntime, dmlshim
        onnxruntime.InferenceSession = dmlshim.InferenceSession
        """,
    )
    _same_results(ours, theirs)
    assert ours["session_class"] == "dmlshim.ort.session.InferenceSession"
    # Patching the class alone leaves onnxruntime's provider list: the client asked for what it lists.
    assert ours["providers"] == theirs["providers"]


def test_the_module_replaced(tmp_path: Path, theirs: dict[str, Any]) -> None:
    ours = _script(
        tmp_path,
        "typical_script.py",
        MODEL,
        FEEDS,
        """
        import sys, dmlshim.ort
        sys.modules["onnxruntime"] = dmlshim.ort.standin_module()
        """,
    )
    _same_results(ours, theirs)
    assert ours["session_class"] == "dmlshim.ort.standin.InferenceSession"
    assert ours["available"] == ["DmlExecutionProvider", *theirs["available"]]
    assert ours["providers"] == ["DmlExecutionProvider", *theirs["providers"]]
    assert ours["device"] == "CPU-DML"


def test_install_then_the_script(tmp_path: Path, theirs: dict[str, Any]) -> None:
    ours = _script(
        tmp_path, "typical_script.py", MODEL, FEEDS, "import dmlshim\ndmlshim.install(summary='off')\n"
    )
    _same_results(ours, theirs)
    assert ours["providers"][0] == "DmlExecutionProvider"


def test_the_stand_in_carries_every_name_and_submodule(tmp_path: Path) -> None:
    script = tmp_path / "names.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import dmlshim.ort
            sys.modules["onnxruntime"] = dmlshim.ort.standin_module()
            import onnxruntime
            from onnxruntime import SessionOptions, InferenceSession
            real = sys.modules["onnxruntime"].__dmlshim_real_module__
            # Names newer onnxruntime releases added: importable wherever the real package has them.
            for name in ("AdapterFormat", "LoraAdapter", "OrtArenaCfg", "OrtDeviceVendorId",
                         "OrtDeviceMemoryType", "OrtMemoryInfoDeviceType", "create_and_register_allocator",
                         "set_global_thread_pool_sizes"):
                if hasattr(real, name):
                    exec(f"from onnxruntime import {name}")
            import onnxruntime.capi._pybind_state
            import onnxruntime.capi.onnxruntime_pybind11_state as state
            import onnxruntime.datasets
            for sub in ("quantization", "transformers"):
                try:
                    __import__(f"onnxruntime.{sub}")
                except ImportError as exc:  # as the real package fails here (e.g. ml_dtypes missing)
                    assert getattr(exc, "name", "") and not exc.name.startswith("onnxruntime"), exc
            import onnxruntime.backend as backend
            import onnx
            model = onnx.load(sys.argv[1])
            rep = backend.prepare(model)
            copies = sorted(n for n, m in sys.modules.items() if n.startswith("onnxruntime.")
                            and "dmlshim" in (getattr(m, "__file__", "") or ""))
            print(json.dumps({
                "missing": [n for n in dir(sys.modules["onnxruntime"].__dmlshim_real_module__)
                            if not n.startswith("_") and not hasattr(onnxruntime, n)],
                "version": onnxruntime.__version__,
                "backend_session": type(rep._session).__module__,
                "dmlshim_copies": copies,
                "invalid_argument": state.InvalidArgument.__module__,
                "datasets": onnxruntime.datasets.get_example("sigmoid.onnx").endswith("sigmoid.onnx"),
            }))
            """
        ),
        encoding="utf-8",
    )
    got = json.loads(_python([str(script), str(MODEL)], tmp_path).stdout.strip().splitlines()[-1])
    assert got == {
        "missing": [],
        "version": onnxruntime.__version__,
        "backend_session": "dmlshim.ort.standin",
        "dmlshim_copies": [],
        "invalid_argument": "onnxruntime.capi.onnxruntime_pybind11_state",
        "datasets": True,
    }


def test_the_command_on_an_unmodified_script_prints_one_summary(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    summary_file = tmp_path / "summary.json"
    proc = _python(
        [
            "-m",
            "dmlshim.ort",
            "--summary-file",
            str(summary_file),
            str(CLIENTS / "typical_script.py"),
            str(SCATTER_MODEL),
            str(SCATTER_FEEDS),
            str(out),
        ],
        tmp_path,
    )
    ours = json.loads(out.read_text(encoding="utf-8"))
    session = onnxruntime.InferenceSession(str(SCATTER_MODEL), providers=["CPUExecutionProvider"])
    with np.load(SCATTER_FEEDS) as data:
        want = session.run(None, {i.name: data[i.name] for i in session.get_inputs()})
    for got, w in zip(ours["outputs"].values(), want, strict=True):
        np.testing.assert_array_equal(np.asarray(got, dtype=w.dtype), w)
    assert proc.stderr.count("dmlshim (DirectML emulated over onnxruntime") == 1
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    # One session in the script's own run (the missing file made none); both ScatterND nodes emulated.
    assert summary["totals"]["sessions"] == 1
    (sess,) = summary["sessions"]
    assert sess["model"] == str(SCATTER_MODEL) and sess["engine"] == "partitioned"
    assert {n["op_type"] for n in sess["nodes"]} == {"ScatterND"}
    assert all(n["runs"] == {"dml": 1} for n in sess["nodes"])
    assert summary["totals"]["emulated_nodes"] == 2


def test_json_summary_on_request_with_a_warning(tmp_path: Path) -> None:
    script = tmp_path / "dup.py"
    script.write_text(
        textwrap.dedent(
            """
            import numpy as np, onnx, onnxruntime as ort
            from onnx import helper, TensorProto
            node = helper.make_node("ScatterND", ["data", "idx", "upd"], ["out"], name="dup_scatter")
            graph = helper.make_graph([node], "g",
                [helper.make_tensor_value_info("data", TensorProto.FLOAT, [4]),
                 helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 1]),
                 helper.make_tensor_value_info("upd", TensorProto.FLOAT, [2])],
                [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])])
            model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
            sess = ort.InferenceSession(model.SerializeToString())
            sess.run(None, {"data": np.zeros(4, np.float32), "idx": np.array([[1], [1]]),
                            "upd": np.ones(2, np.float32)})
            """
        ),
        encoding="utf-8",
    )
    proc = _python(["-m", "dmlshim.ort", "--summary", "json", str(script)], tmp_path)
    summary = json.loads(proc.stderr[proc.stderr.index("{") :])
    assert summary["onnxruntime"] == onnxruntime.__version__
    (warning,) = [w for w in summary["warnings"] if w["code"] == "duplicate_scatter_indices"]
    assert warning["node"] == "dup_scatter" and "1 scatter write" in warning["message"]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_worker_processes_are_bound_and_counted(tmp_path: Path, method: str) -> None:
    out = tmp_path / "pool.json"
    summary_file = tmp_path / "summary.json"
    _python(
        [
            "-m",
            "dmlshim.ort",
            "--summary",
            "off",
            "--summary-file",
            str(summary_file),
            str(CLIENTS / "pool_script.py"),
            str(MODEL),
            str(FEEDS),
            str(out),
            method,
        ],
        tmp_path,
    )
    session = onnxruntime.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    with np.load(FEEDS) as data:
        want = session.run(None, {i.name: data[i.name] for i in session.get_inputs()})[0]
    results = json.loads(out.read_text(encoding="utf-8"))
    assert [r[0] for r in results] == ["dmlshim.ort.standin"] * 2
    for _, got in results:
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want)
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    assert summary["totals"]["sessions"] == 2 and summary["totals"]["runs"] == 2
    assert os.getpid() not in summary["processes"] and len(summary["processes"]) >= 2


def test_sigterm_inside_a_flush_ends_the_worker_with_its_tally(tmp_path: Path) -> None:
    """A pool's finalizer flushes the tally and the pool then sends SIGTERM: when the signal lands inside
    that flush the worker must still end (it once waited forever on the tally's lock) and leave its tally."""
    state = tmp_path / "dmlshim-ort-locked-test"  # as the first process names its state folder
    state.mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(
        textwrap.dedent(
            f"""
            import os, signal
            import numpy as np
            import dmlshim
            from dmlshim.ort import install as binding, tracking

            dmlshim.install(children=False)
            import onnxruntime
            sess = onnxruntime.InferenceSession({str(MODEL)!r})
            with np.load({str(FEEDS)!r}) as data:
                sess.run(None, {{i.name: data[i.name] for i in sess.get_inputs()}})
            tally = tracking.TRACKER.sessions[0]
            real = type(tally).to_text

            def signal_then_describe(self, pid, encoder):
                # delivered while the flush holds the tally's lock, as a pool's terminate can be
                os.kill(os.getpid(), signal.SIGTERM)
                return real(self, pid, encoder)

            type(tally).to_text = signal_then_describe
            binding._State.flushed_changes = -1
            binding.flush()
            print("still running after SIGTERM")
            """
        ),
        encoding="utf-8",
    )
    env = _env()
    env["DMLSHIM_ORT_STATE"] = str(state)
    env["DMLSHIM_ORT_OWNER"] = "1"  # some other process owns the summary: this one is a worker
    try:
        proc = subprocess.run(
            [sys.executable, str(worker)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a SIGTERM inside the flush left the worker waiting forever")
    assert proc.returncode == -15, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "still running" not in proc.stdout
    tallies = list(state.glob("*.json"))
    assert len(tallies) == 1
    tally = json.loads(tallies[0].read_text(encoding="utf-8"))
    assert len(tally["sessions"]) == 1 and tally["process"] == int(tallies[0].stem)


def test_the_command_reports_a_missing_script(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", str(tmp_path / "nope.py")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "nope.py" in proc.stderr and "Traceback" not in proc.stderr


def test_the_summary_file_never_replaces_an_input_or_an_existing_file(tmp_path: Path) -> None:
    # A tester's finding: --summary-file overwrote the model the script was given, and the script itself.
    model = tmp_path / "m.onnx"
    model.write_bytes(SCATTER_MODEL.read_bytes())
    script = tmp_path / "s.py"
    script.write_text("import sys, onnxruntime as ort\nort.InferenceSession(sys.argv[1])\n")
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    for target, expect in ((model, "refusing to replace an input"), (script, "refusing to replace an input"),
                           (existing, "pass --overwrite")):  # fmt: skip
        before = target.read_bytes()
        proc = subprocess.run(
            [sys.executable, "-m", "dmlshim.ort", "--summary-file", str(target), str(script), str(model)],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert proc.returncode == 2 and expect in proc.stderr, proc.stderr
        assert target.read_bytes() == before
    _python(["-m", "dmlshim.ort", "--summary-file", str(existing), "--overwrite", str(script), str(model)],
            tmp_path)  # fmt: skip
    assert json.loads(existing.read_text())["totals"]["sessions"] == 1
