"""A client of onnxruntime's Python API, written for onnxruntime alone (it never imports dmlshim).

Run it as ``python api_surface_client.py MODEL.onnx MODEL.npz OUT.json`` under plain onnxruntime, and as
``python -m dmlshim.ort --emulate all api_surface_client.py ...`` under dmlshim: it exercises the session's
API broadly (metadata, run with every kind of feed and output selection, RunOptions, OrtValues, IOBinding
with every bind form, run_async, set_providers, profiling, SessionOptions fields) and writes what each
call answered, arrays as dtype, shape and a digest of their bytes, so that the two runs can be compared.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort


def digest(value: Any) -> list[Any]:
    array = np.ascontiguousarray(np.asarray(value))
    return [str(array.dtype), list(array.shape), hashlib.sha256(array.tobytes()).hexdigest()[:24]]


def arg(node_arg: Any) -> list[Any]:
    return [node_arg.name, node_arg.type, node_arg.shape]


def options(out_dir: Path, profile: bool) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2  # run_async needs a pool of two or more
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    so.add_session_config_entry("session.use_env_allocators", "0")
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = str(out_dir / "client_profile")
        so.optimized_model_filepath = str(out_dir / "client_optimized.onnx")
    return so


def binding_runs(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], outs: list[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    binding = sess.io_binding()
    names = list(feeds)
    binding.bind_cpu_input(names[0], feeds[names[0]])
    for name in names[1:]:
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(feeds[name]))
    binding.bind_output(outs[0].name)  # allocated by the session
    preallocated = None
    if len(outs) > 1:
        want = sess.run([outs[1].name], feeds)[0]
        preallocated = ort.OrtValue.ortvalue_from_shape_and_type(list(want.shape), want.dtype)
        binding.bind_ortvalue_output(outs[1].name, preallocated)
    pointer_target = None
    if len(outs) > 2:
        want = sess.run([outs[2].name], feeds)[0]
        pointer_target = np.zeros_like(want)
        binding.bind_output(
            outs[2].name,
            "cpu",
            0,
            pointer_target.dtype,
            list(pointer_target.shape),
            pointer_target.ctypes.data,
        )
    for o in outs[3:]:
        binding.bind_output(o.name, "cpu")
    binding.synchronize_inputs()
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    found["binding_outputs"] = [digest(v.numpy()) for v in binding.get_outputs()]
    found["binding_copy"] = [digest(v) for v in binding.copy_outputs_to_cpu()]
    found["binding_value_kinds"] = [
        [v.is_tensor(), v.device_name(), v.shape(), v.data_type(), v.has_value()]
        for v in binding.get_outputs()
    ]
    if preallocated is not None:
        found["preallocated"] = digest(preallocated.numpy())
    if pointer_target is not None:
        found["pointer_target"] = digest(pointer_target)
    binding.clear_binding_outputs()
    binding.bind_output(outs[0].name)
    sess.run_with_iobinding(binding, ort.RunOptions())
    found["rebound"] = digest(binding.copy_outputs_to_cpu()[0])
    binding.clear_binding_inputs()
    try:
        sess.run_with_iobinding(binding)
        found["unbound_inputs"] = "ran"
    except Exception as exc:  # the client records what the runtime said
        found["unbound_inputs"] = caught_by(exc)
    binding.bind_output("no_such_output")  # onnxruntime checks an output's name when it runs
    try:
        sess.run_with_iobinding(binding)
        found["unknown_output_bound"] = "ran"
    except Exception as exc:
        found["unknown_output_bound"] = caught_by(exc)
    try:
        binding.bind_cpu_input("no_such_input", next(iter(feeds.values())))
        found["unknown_input_bound"] = "bound"
    except Exception as exc:
        found["unknown_input_bound"] = caught_by(exc)
    return found


CATCHES = (
    "InvalidArgument",
    "Fail",
    "RuntimeException",
    "InvalidGraph",
    "ValueError",
    "RuntimeError",
    "TypeError",
    "AttributeError",
    "KeyError",
)


def caught_by(exc: BaseException) -> list[str]:
    """Which of the classes clients write in ``except`` clauses catch ``exc``."""
    names = {c.__name__ for c in type(exc).__mro__}
    return [n for n in CATCHES if n in names]


def errors(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, str]:
    found = {}
    first = next(iter(feeds))
    cases = {
        "wrong_dtype": lambda: sess.run(None, {**feeds, first: feeds[first].astype(np.float64)}),
        "missing_input": lambda: sess.run(None, {k: v for k, v in feeds.items() if k != first}),
        "unknown_output": lambda: sess.run(["no_such_output"], feeds),
        "wrong_rank": lambda: sess.run(None, {**feeds, first: feeds[first][None]}),
    }
    for name, call in cases.items():
        try:
            call()
            found[name] = "ran"
        except Exception as exc:
            found[name] = caught_by(exc)
    return found


def main(model: str, inputs: str, out: str) -> None:
    out_path = Path(out)
    out_dir = out_path.parent
    with np.load(inputs) as data:
        feeds = {k: data[k] for k in data.files}
    providers = ["DmlExecutionProvider", "CPUExecutionProvider"]
    providers = [p for p in providers if p in ort.get_available_providers()]
    so = options(out_dir, profile=True)
    sess = ort.InferenceSession(model, so, providers=providers)
    found: dict[str, Any] = {"device": ort.get_device(), "providers": sess.get_providers()}
    outs = sess.get_outputs()
    found["inputs"] = [arg(a) for a in sess.get_inputs()]
    found["outputs"] = [arg(a) for a in outs]
    found["overridable"] = [arg(a) for a in sess.get_overridable_initializers()]
    meta = sess.get_modelmeta()
    found["meta"] = [
        meta.producer_name,
        meta.graph_name,
        meta.domain,
        meta.description,
        meta.graph_description,
        meta.version,
        dict(meta.custom_metadata_map),
    ]
    found["provider_options_cpu"] = sess.get_provider_options().get("CPUExecutionProvider")
    sopts = sess.get_session_options()
    found["session_options"] = [
        sopts.intra_op_num_threads,
        sopts.inter_op_num_threads,
        str(sopts.graph_optimization_level),
        str(sopts.execution_mode),
        sopts.log_severity_level,
        sopts.enable_profiling,
    ]

    full = sess.run(None, feeds)
    found["run_all"] = [digest(v) for v in full]
    found["run_empty_names"] = [digest(v) for v in sess.run([], feeds)]
    last = outs[-1].name
    found["run_last_only"] = [digest(v) for v in sess.run([last], feeds)]
    found["run_reversed"] = [digest(v) for v in sess.run([o.name for o in reversed(outs)], feeds)]
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "client"
    ro.only_execute_path_to_fetches = True
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    found["run_options"] = [digest(v) for v in sess.run(None, feeds, ro)]
    found["run_options_fields"] = [
        ro.logid,
        ro.only_execute_path_to_fetches,
        ro.terminate,
        ro.log_severity_level,
    ]
    lists = {k: v.tolist() for k, v in feeds.items() if v.dtype in (np.int64, np.float32)}
    found["run_lists"] = [digest(v) for v in sess.run(None, {**feeds, **lists})]

    values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    ort_outs = sess.run_with_ort_values(None, values)
    found["ort_values"] = [[digest(v.numpy()), v.element_type(), v.shape(), v.data_type()] for v in ort_outs]
    found["mixed_feeds"] = [
        digest(v) for v in sess.run(None, {**feeds, next(iter(feeds)): values[next(iter(feeds))]})
    ]
    first = next(iter(feeds))
    blank = ort.OrtValue.ortvalue_from_shape_and_type(list(feeds[first].shape), feeds[first].dtype)
    blank.update_inplace(feeds[first])
    found["update_inplace"] = [digest(v) for v in sess.run(None, {**feeds, first: blank})]

    done = threading.Event()
    got: dict[str, Any] = {}

    def callback(results: Any, user_data: Any, error: str) -> None:
        got["results"] = [digest(v) for v in results]
        got["user_data"] = user_data
        got["error"] = error
        done.set()

    sess.run_async(None, feeds, callback, "ticket")
    done.wait(120)
    found["run_async"] = got

    found.update(binding_runs(sess, feeds, list(outs)))
    found["errors"] = errors(sess, feeds)

    found["profiling_started"] = sess.get_profiling_start_time_ns() > 0
    profile = Path(sess.end_profiling())
    events = json.loads(profile.read_text())
    found["profile"] = [
        profile.name.startswith("client_profile_"),
        profile.suffix,
        sum(e.get("name") == "model_run" for e in events) >= 1,
        sess.end_profiling(),
    ]
    found["optimized_model_written"] = (out_dir / "client_optimized.onnx").is_file()

    sess.set_providers(["CPUExecutionProvider"])
    found["cpu_providers"] = sess.get_providers()
    found["cpu_run"] = [digest(v) for v in sess.run(None, feeds)]
    sess.set_providers(providers)
    found["back_providers"] = sess.get_providers()
    found["back_run"] = [digest(v) for v in sess.run(None, feeds)]

    plain = ort.InferenceSession(
        Path(model).read_bytes(), options(out_dir, profile=False), providers=providers
    )
    found["from_bytes"] = [digest(v) for v in plain.run(None, feeds)]
    out_path.write_text(json.dumps(found, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
