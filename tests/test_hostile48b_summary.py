"""The drop-in's exit summary (``python -m dmlshim.ort --summary json``) counts every run a program made
and every run that raised, on every path: steady runs, the plain runner of a model with nothing to
emulate, IOBinding, ``run_with_ort_values``, ``run_async``, threads, and runs refused for their feeds or
output names (missing, extra, wrong dtype or shape, an unknown output: not counted before), and an
IOBinding run with no output bound or with outputs that do not fit the OrtValue bound to them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_ort_summary_runs import run_with_summary

_SCRIPT = """
import concurrent.futures as cf, threading
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto

def model(plain):
    node = (helper.make_node("Reshape", ["data", "idx"], ["out"], name="r") if plain
            else helper.make_node("Gather", ["data", "idx"], ["out"], name="g1"))
    graph = helper.make_graph([node], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 18)]
    return helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()

data = np.arange(12, dtype=np.float32).reshape(4, 3)
counts = []
for plain, good_idx, bad_idx in ((False, [1, 2], [1, 9]), (True, [3, 4], [5, 5])):
    sess = ort.InferenceSession(model(plain))
    ok = bad = 0
    def run(feeds, names=None):
        global ok, bad
        try:
            sess.run(names, feeds)
        except Exception:
            bad += 1
        else:
            ok += 1
    for _ in range(8):
        run({"data": data, "idx": np.array(good_idx)})
    run({"data": data, "idx": np.array(bad_idx)})
    run({"data": data})
    run({"data": data.astype(np.float64), "idx": np.array(good_idx)})
    run({"data": data, "idx": np.array(good_idx)}, ["nope"])
    run({"data": data, "idx": np.array(good_idx), "extra": data})
    run({"data": data[:2], "idx": np.array(good_idx)})
    binding = sess.io_binding()
    binding.bind_cpu_input("data", data)
    binding.bind_output("out")
    for idx in (good_idx, bad_idx, good_idx):
        binding.bind_cpu_input("idx", np.array(idx))
        try:
            sess.run_with_iobinding(binding)
        except Exception:
            bad += 1
        else:
            ok += 1
    unbound = sess.io_binding()  # no output bound: refused before a run
    unbound.bind_cpu_input("data", data)
    unbound.bind_cpu_input("idx", np.array(good_idx))
    small = sess.io_binding()  # an output bound to an OrtValue of the wrong shape: raises after the run
    small.bind_cpu_input("data", data)
    small.bind_cpu_input("idx", np.array(good_idx))
    small.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(np.zeros((1, 1), np.float32)))
    for refused in (unbound, small):
        try:
            sess.run_with_iobinding(refused)
        except Exception:
            bad += 1
        else:
            ok += 1
    for idx in (good_idx, bad_idx):
        pairs = (("data", data), ("idx", np.array(idx)))
        values = {name: ort.OrtValue.ortvalue_from_numpy(v) for name, v in pairs}
        try:
            sess.run_with_ort_values(None, values)
        except Exception:
            bad += 1
        else:
            ok += 1
    for idx in (good_idx, bad_idx, None):
        feeds = {"data": data} if idx is None else {"data": data, "idx": np.array(idx)}
        done, errors = threading.Event(), []
        try:  # a missing input is refused before the run starts, as onnxruntime refuses it
            sess.run_async(None, feeds, lambda results, user, error: (errors.append(error), done.set()), None)
        except Exception:
            bad += 1
            continue
        assert done.wait(60)
        if errors[0]:
            bad += 1
        else:
            ok += 1
    with cf.ThreadPoolExecutor(3) as pool:
        pool_feeds = [{"data": data, "idx": np.array(good_idx if k % 3 else bad_idx)} for k in range(12)]
        list(pool.map(run, pool_feeds))
    counts.append([ok, bad])
print("COUNTS", counts)
"""


def test_every_run_and_every_refused_run_is_counted(tmp_path: Path) -> None:
    summary, stdout = run_with_summary(tmp_path, _SCRIPT)
    counts = json.loads(stdout.split("COUNTS", 1)[1].strip())
    assert [[s["runs"], s["failed_runs"]] for s in summary["sessions"]] == counts
    assert counts == [[8 + 2 + 1 + 1 + 8, 1 + 5 + 1 + 2 + 1 + 2 + 4]] * 2
