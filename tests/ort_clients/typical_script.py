"""A typical onnxruntime user script, unmodified: knows nothing of dmlshim.

Usage: python typical_script.py MODEL.onnx FEEDS.npz OUT.json
"""

import json
import sys

import numpy as np
import onnxruntime
import onnxruntime as ort
from onnxruntime import SessionOptions

model, feeds_path, out_path = sys.argv[1:4]
options = SessionOptions()
options.intra_op_num_threads = 1
sess = ort.InferenceSession(model, options, providers=ort.get_available_providers())
with np.load(feeds_path) as data:
    feeds = {i.name: data[i.name] for i in sess.get_inputs()}
outputs = sess.run(None, feeds)

errors = {}
first = sess.get_inputs()[0].name
try:
    sess.run(None, {**feeds, first: feeds[first].astype(np.float64)})
except onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument:
    errors["wrong_dtype"] = "InvalidArgument"
try:
    ort.InferenceSession(model + ".missing.onnx")
except onnxruntime.capi.onnxruntime_pybind11_state.NoSuchFile:
    errors["missing_file"] = "NoSuchFile"
binding = ort.IOBinding(sess)
try:
    binding.bind_cpu_input("no such input", feeds[first])
except RuntimeError:
    errors["bind_unknown"] = "RuntimeError"
binding.bind_output(sess.get_outputs()[0].name)
try:
    sess.run_with_iobinding(binding)
except RuntimeError:
    errors["unbound_input"] = "RuntimeError"

with open(out_path, "w", encoding="utf-8") as handle:
    json.dump(
        {
            "session_class": f"{type(sess).__module__}.{type(sess).__qualname__}",
            "version": ort.__version__,
            "providers": sess.get_providers(),
            "available": ort.get_available_providers(),
            "device": ort.get_device(),
            "model_path": sess._model_path,
            "errors": errors,
            "outputs": {
                o.name: np.asarray(v).tolist() for o, v in zip(sess.get_outputs(), outputs, strict=True)
            },
        },
        handle,
    )
