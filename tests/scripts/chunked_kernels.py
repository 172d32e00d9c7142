"""Run gather/scatter nodes through dmlshim with tiny kernel chunks and two kernel threads (set by the
caller through DMLSHIM_KERNEL_CHUNK / DMLSHIM_KERNEL_THREADS) and compare with onnxruntime CPU.

Prints one line per case, "ok NAME" or "FAIL NAME: why"; used by tests/test_kernels_chunked.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from onnx import helper
from tests.oracle import make_node_model, ort_run

from dmlshim.dml.enums import FeatureLevel
from dmlshim.errors import IndexOutOfRangeError
from dmlshim.kernels import parallel
from dmlshim.translate import TensorInfo, run_translation, translate_node
from dmlshim.translate.plan import elem_type_of


def case(name: str, op: str, arrays: list[np.ndarray], **attrs: int) -> None:
    names = ["data", "indices", "updates"][: len(arrays)]
    node = helper.make_node(op, names, ["output"], name=name, **attrs)
    infos = [TensorInfo(tuple(a.shape), elem_type_of(a.dtype)) for a in arrays]
    t = translate_node(node, 13, infos, FeatureLevel.FL_5_0, name=name)
    feeds = dict(zip(names, arrays, strict=True))
    expected = ort_run(make_node_model(op, feeds, attrs), feeds)[0]
    for _ in range(2):  # the second call reuses the threads' scratch buffers
        got = run_translation(t, arrays).output
        if got.dtype != expected.dtype or not np.array_equal(got, expected):
            print(f"FAIL {name}: differs from onnxruntime")
            return
    print(f"ok {name}")


def main() -> None:
    assert parallel.CHUNK_ELEMENTS <= 256 and parallel.THREADS >= 2, "run with tiny chunks and 2 threads"
    rng = np.random.default_rng(3)
    data = rng.standard_normal((96, 80)).astype(np.float32)
    case("ge_last", "GatherElements", [data, rng.integers(-80, 80, (96, 50))], axis=1)
    case("ge_first", "GatherElements", [data, rng.integers(0, 96, (40, 80))], axis=0)
    case("gather_rows", "Gather", [data[:, :4].copy(), rng.integers(-96, 96, (500,))], axis=0)
    case("gnd_t2", "GatherND", [data, rng.integers(0, 80, (700, 2)) % [96, 80]])
    case("gnd_t1", "GatherND", [data[:, :2].copy(), rng.integers(0, 96, (600, 1))])
    rows = np.stack([rng.permutation(80)[:30] for _ in range(96)])
    case(
        "se_unique", "ScatterElements", [data, rows, rng.standard_normal((96, 30)).astype(np.float32)], axis=1
    )
    dup = rng.integers(0, 80, (96, 30))
    case(
        "se_duplicates",
        "ScatterElements",
        [data, dup, rng.standard_normal((96, 30)).astype(np.float32)],
        axis=1,
    )
    tuples = np.stack(np.unravel_index(rng.permutation(96 * 80)[:3000], (96, 80)), axis=-1)
    case("snd_t2", "ScatterND", [data, tuples, rng.standard_normal(3000).astype(np.float32)])
    node = helper.make_node("GatherElements", ["data", "indices"], ["output"], name="bad", axis=1)
    bad = rng.integers(0, 80, (96, 50))
    bad[70, 3] = 80
    t = translate_node(
        node, 13, [TensorInfo((96, 80), elem_type_of(np.dtype(np.float32))), TensorInfo((96, 50), 7)],
        FeatureLevel.FL_5_0, name="bad",
    )  # fmt: skip
    try:
        run_translation(t, [data, bad])
        print("FAIL out_of_range: no error")
    except IndexOutOfRangeError as exc:
        ok = "80" in str(exc) and "[70, 3]" in str(exc)
        print(("ok" if ok else "FAIL") + f" out_of_range: {str(exc)[:80]}")


if __name__ == "__main__":
    main()
