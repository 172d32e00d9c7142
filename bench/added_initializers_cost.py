"""Peak memory of a session built with a large value added through ``SessionOptions`` (issue 35 leftover):
``add_external_initializers`` (the model keeps the weight in an external file) or ``add_initializer``, for
onnxruntime and dmlshim, each in a fresh child process.

Usage::

    python bench/added_initializers_cost.py [--mb 100] [--repeats 3] [--engine partitioned]

The model is a Gather from a float32 weight of ``--mb`` MB (kept in an external file, or inline for
``add_initializer``; generated into a temporary folder by a child process, so that this parent stays
small) with a Relu on its output. The child makes the value (a numpy array and its ``OrtValue``), adds it
to its options, builds the session and runs it once; the parent reads the child's peak resident size from
``os.wait4`` (``ru_maxrss``; Linux carries a parent's peak into its children, hence the small parent) and
the child reports its own ``VmHWM`` and its resident size before the build (the value made). ``extra`` is
the peak minus that resident size: what the build and the run add on top of the caller's own array.
Ratios are dmlshim / onnxruntime of the same repeat; the table gives medians.

An earlier version made the model in this process: its ~500 MB peak was every child's ``ru_maxrss`` floor,
which read as onnxruntime's peak (the "~525 MB" of issue 35's leftover; onnxruntime's own is ~260 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, time
import numpy as np
side, how, path, rows, engine = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
if side == "dmlshim":
    import dmlshim
import onnxruntime as ort

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

weight = np.full((rows, 256), 0.5, np.float32)
value = ort.OrtValue.ortvalue_from_numpy(weight)
so = ort.SessionOptions()
if how == "external":
    so.add_external_initializers(["w"], [value])
else:
    so.add_initializer("w", value)
before = rss_mb()
start = time.perf_counter()
if side == "dmlshim":
    session = dmlshim.InferenceSession(path, so, engine=engine)
else:
    session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
built = time.perf_counter() - start
(y,) = session.run(None, {"i": np.array([0, rows - 1], np.int64)})
assert float(y.sum()) == 0.5 * 2 * 256, float(y.sum())
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
print(json.dumps({"before_mb": before, "after_mb": rss_mb(), "hwm_mb": hwm, "build_s": built}))
"""


def make_model(folder: Path, rows: int, inline: bool) -> Path:
    """Gather(w[rows, 256] float32, i) -> Relu: ``w`` in ``w.bin`` beside the model (or inline), zeros."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.zeros((rows, 256), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["w", "i"], ["g"], axis=0, name="gather"),
            helper.make_node("Relu", ["g"], ["y"], name="relu"),
        ],
        "added",
        [helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 256])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = folder / ("initializer.onnx" if inline else "external.onnx")
    if inline:
        onnx.save(model, str(path))
    else:
        onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


def measure(side: str, how: str, path: Path, rows: int, engine: str) -> dict[str, Any]:
    """One child: its peak resident size (``os.wait4``) and what it reports."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider")}
    argv = [sys.executable, "-c", _CHILD, side, how, str(path), str(rows), engine]
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file, env=env)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
        err_file.seek(0)
        err = err_file.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{side} {how} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    found: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    found["peak_mb"] = usage.ru_maxrss / 1024
    found["extra_mb"] = found["peak_mb"] - found["before_mb"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=100, help="size of the added weight in MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", default="partitioned", help="dmlshim's engine")
    parser.add_argument("--how", choices=["external", "initializer", "both"], default="both")
    args = parser.parse_args()
    rows = args.mb * 1_000_000 // (256 * 4)
    hows = ["external", "initializer"] if args.how == "both" else [args.how]
    with tempfile.TemporaryDirectory(prefix="dmlshim-added-") as tmp:
        folder = Path(tmp)
        paths = {how: folder / f"{how}.onnx" for how in ("external", "initializer")}
        maker = (
            "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from bench.added_initializers_cost import make_model; "
            "folder, rows = Path(sys.argv[2]), int(sys.argv[3]); "
            "make_model(folder, rows, False); make_model(folder, rows, True)"
        )
        subprocess.run([sys.executable, "-c", maker, str(REPO), str(folder), str(rows)], check=True)
        for how in hows:
            rows_out: dict[str, list[dict[str, Any]]] = {"onnxruntime": [], "dmlshim": []}
            for _ in range(args.repeats):
                for side in ("onnxruntime", "dmlshim"):
                    rows_out[side].append(measure(side, how, paths[how], rows, args.engine))
            print(f"{how} ({args.mb} MB, engine {args.engine}):")
            for side, found in rows_out.items():
                peak = statistics.median(r["peak_mb"] for r in found)
                extra = statistics.median(r["extra_mb"] for r in found)
                build = statistics.median(r["build_s"] for r in found)
                hwm = statistics.median(r["hwm_mb"] for r in found)
                print(
                    f"  {side:12s} peak {peak:7.1f} MB (own VmHWM {hwm:7.1f})  extra {extra:7.1f} MB  "
                    f"build {build:6.2f} s"
                )
            ratios = [
                d["peak_mb"] / o["peak_mb"]
                for d, o in zip(rows_out["dmlshim"], rows_out["onnxruntime"], strict=True)
            ]
            print(f"  peak ratio dmlshim / onnxruntime: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
