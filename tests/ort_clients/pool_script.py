"""An unmodified program whose worker processes run the sessions (multiprocessing, spawn by default).

Usage: python pool_script.py MODEL.onnx FEEDS.npz OUT.json [START_METHOD]
"""

import json
import multiprocessing
import sys

import numpy as np


def work(args):
    import onnxruntime as ort

    model, feeds_path = args
    sess = ort.InferenceSession(model, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    with np.load(feeds_path) as data:
        feeds = {i.name: data[i.name] for i in sess.get_inputs()}
    return type(sess).__module__, np.asarray(sess.run(None, feeds)[0]).tolist()


if __name__ == "__main__":
    model, feeds_path, out_path = sys.argv[1:4]
    method = sys.argv[4] if len(sys.argv) > 4 else "spawn"
    with multiprocessing.get_context(method).Pool(2) as pool:
        results = pool.map(work, [(model, feeds_path)] * 2)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
