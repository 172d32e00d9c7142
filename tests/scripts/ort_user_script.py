"""A script written for onnxruntime: greedy decoding with a static KV cache, then a beam reorder.

tests/test_session_ort_script.py runs it twice, as written and with its import line changed to
``import dmlshim as ort``, and compares what it saves.

Usage: ``python ort_user_script.py MODELS_DIR OUT_DIR`` (MODELS_DIR: the repository's onnx_models).
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def session_options(out_dir):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = str(out_dir / "decoder_profile")
    so.optimized_model_filepath = str(out_dir / "decoder_optimized.onnx")
    return so


def zeros_for(arg, dims=None):
    shape = [d if isinstance(d, int) else dims[d] for d in arg.shape]
    return np.zeros(shape, dtype=NUMPY_TYPES[arg.type])


def decode(sess, steps, first_token):
    inputs = {i.name: i for i in sess.get_inputs()}
    cache_len = inputs["key_cache"].shape[2]
    feeds = {name: zeros_for(arg) for name, arg in inputs.items()}
    feeds["input_ids"][...] = first_token
    tokens, logprobs = [], []
    for step in range(steps):
        feeds["cache_position"][...] = step
        mask = np.full(inputs["attention_mask"].shape, -1e9, dtype=np.float32)
        mask[..., : step + 1] = 0.0
        feeds["attention_mask"] = mask
        candidate_ids, candidate_logprobs, new_keys, new_values = sess.run(None, feeds)
        token = int(candidate_ids[0, -1, 0]) if candidate_ids.ndim == 3 else int(candidate_ids.flat[0])
        tokens.append(token)
        logprobs.append(candidate_logprobs)
        feeds["input_ids"] = np.array([[token]], dtype=np.int64)
        feeds["key_cache"], feeds["value_cache"] = new_keys, new_values
        assert step < cache_len
    return tokens, np.stack(logprobs), feeds


def main(models, out_dir):
    models, out_dir = Path(models), Path(out_dir)
    wanted = ["DmlExecutionProvider", "CPUExecutionProvider"]
    providers = [p for p in wanted if p in ort.get_available_providers()]
    sess = ort.InferenceSession(
        str(models / "tiny_decoder_step.onnx"), session_options(out_dir), providers=providers
    )
    meta = sess.get_modelmeta()
    tokens, logprobs, feeds = decode(sess, steps=6, first_token=3)

    # One more step through an IOBinding, as a latency-minded script would write it.
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    out_names = [o.name for o in sess.get_outputs()]
    for name in out_names:
        binding.bind_output(name, "cpu")
    sess.run_with_iobinding(binding)
    bound = dict(zip(out_names, binding.copy_outputs_to_cpu(), strict=True))
    ort_values = sess.run_with_ort_values(
        ["candidate_logprobs"], {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    )
    profile = sess.end_profiling()

    # A model with a symbolic batch dimension: fill it in from get_inputs().
    beams = ort.InferenceSession(str(models / "gather_beam_reorder_dynamic.onnx"), providers=providers)
    keys_arg, idx_arg = beams.get_inputs()
    rng = np.random.default_rng(7)
    dims = {keys_arg.shape[0]: 4}
    past = rng.standard_normal([dims.get(d, d) for d in keys_arg.shape]).astype(NUMPY_TYPES[keys_arg.type])
    beam_idx = np.array([3, 0, 0, 2], dtype=NUMPY_TYPES[idx_arg.type])
    (reordered,) = beams.run([beams.get_outputs()[0].name], {keys_arg.name: past, idx_arg.name: beam_idx})

    np.savez(
        out_dir / "outputs.npz",
        tokens=np.array(tokens),
        logprobs=logprobs,
        bound_logprobs=bound["candidate_logprobs"],
        bound_key_cache=bound["new_key_cache"],
        ortvalue_logprobs=ort_values[0].numpy(),
        reordered=reordered,
    )
    summary = {
        "providers": sess.get_providers(),
        "available": ort.get_available_providers(),
        "profile": profile,
        "producer": meta.producer_name,
        "inputs": [[i.name, i.type, i.shape] for i in sess.get_inputs()],
        "beam_inputs": [[i.name, i.type, i.shape] for i in beams.get_inputs()],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
