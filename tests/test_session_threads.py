"""Default sessions must be exact on scatter reductions with duplicate indices.

onnxruntime's CPU ScatterND drops updates on duplicate indices when it runs with several intra-op threads,
so the fallback sessions dmlshim builds for such nodes default to one thread.
"""

from __future__ import annotations

import numpy as np

import dmlshim
from tests.oracle import make_node_model, ort_run


def test_default_session_scatternd_add_with_duplicates_is_exact() -> None:
    rng = np.random.default_rng(0)
    data = np.zeros((64, 1024), np.float32)
    indices = rng.integers(0, 4, (5000, 1)).astype(np.int64)
    updates = np.ones((5000, 1024), np.float32)
    feeds = {"data": data, "indices": indices, "updates": updates}
    model = make_node_model("ScatterND", feeds, {"reduction": "add"}, opset=18)
    expected = ort_run(model, feeds)[0]  # single-threaded reference
    # Every row addressed k times holds exactly k: counts come straight from the indices.
    counts = np.bincount(indices[:, 0], minlength=64).astype(np.float32)
    np.testing.assert_array_equal(expected, np.repeat(counts[:, None], 1024, axis=1))
    session = dmlshim.InferenceSession(model)
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, feeds)[0], expected)
