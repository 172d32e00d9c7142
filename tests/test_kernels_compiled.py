"""The compiled kernels (the ``fast`` extra, numba) against the numpy kernels, bit for bit, and against
onnxruntime CPU.

Every kernel test module below is collected here a second time with the compiled kernels selected, so
the same cases (expected values from onnxruntime CPU, the ONNX backend suite and the WebNN test files)
check the compiled path, errors on out-of-range indices included. On top: random cases over every data
and index type compared with the numpy kernels bit for bit (outputs and duplicate counts), the errors of
both compared class and message, the chunked multi-threaded path, the conformance suite, and where numba
keeps its cache. Skipped only when numba is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from dmlshim.extras import install_command

pytest.importorskip("numba", reason=f"the compiled kernels need numba: {install_command('fast')}")

from dmlshim.dml import FeatureLevel, OperatorDesc
from dmlshim.errors import DmlShimError
from dmlshim.kernels import IndexMode, KernelOptions, compiled, execute
from tests import (
    test_kernels_buffers,
    test_kernels_errors,
    test_kernels_gather,
    test_kernels_gather_elements,
    test_kernels_gather_nd,
    test_kernels_scatter,
    test_webnn_cases,
)
from tests.test_kernels_support import (
    DATA_DTYPES,
    INDEX_DTYPES,
    gather_desc,
    gather_elements_desc,
    gather_nd_desc,
    random_data,
    random_indices,
    scatter_desc,
    scatter_nd_desc,
)

TAKEN: dict[str, int] = {}
"""Calls each compiled entry point took (did not hand back to the numpy kernel), by entry point name."""


@pytest.fixture(autouse=True, scope="module")
def compiled_kernels() -> Iterator[None]:
    """The compiled kernels for every test of this module, each entry point counting the calls it took."""
    before = compiled.mode()
    compiled.use("compiled")
    table = compiled._kernels()
    assert table is not None
    saved = dict(table)

    def counting(name: str, kernel: compiled.Kernel) -> compiled.Kernel:
        def run(desc: Any, inputs: Any, options: Any) -> Any:
            result = kernel(desc, inputs, options)
            if result is not None:
                TAKEN[name] = TAKEN.get(name, 0) + 1
            return result

        return run

    for desc_type, kernel in saved.items():
        table[desc_type] = counting(kernel.__name__, kernel)
    try:
        yield
    finally:
        table.update(saved)
        compiled.use(before)


def _again(module: ModuleType) -> None:
    """Collect ``module``'s tests here too (under a prefixed name), with the compiled kernels selected."""
    prefix = module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    for name, value in vars(module).items():
        if name.startswith("test_") and callable(value):
            globals()[f"test_compiled__{prefix}__{name.removeprefix('test_')}"] = value


for _module in (
    test_kernels_gather,
    test_kernels_gather_elements,
    test_kernels_gather_nd,
    test_kernels_scatter,
    test_kernels_errors,
    test_kernels_buffers,
    test_webnn_cases,
):
    _again(_module)


def _outcome(desc: OperatorDesc, bound: dict[str, np.ndarray], options: KernelOptions, kernels: str) -> Any:
    """``(output bytes, dtype, shape, duplicates)`` or ``(error class, message)``."""
    try:
        result = execute(desc, bound, options, kernels=kernels)
    except DmlShimError as e:
        return type(e), str(e)
    out = result.output
    assert out.flags.c_contiguous
    return out.tobytes(), out.dtype, out.shape, result.duplicate_indices


def _bind(desc: OperatorDesc, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = desc.tensors()
    return {name: a.reshape(tensors[name].sizes) for name, a in arrays.items()}


Case = Callable[[np.random.Generator, np.dtype, np.dtype], tuple[OperatorDesc, dict[str, np.ndarray]]]


def _gather(
    rng: np.random.Generator, dt: np.dtype, it: np.dtype
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    data = random_data(rng, (3, 17, 2), dt)
    axis = int(rng.integers(0, 3))
    idx = random_indices(rng, (4, 5), data.shape[axis], it)
    return gather_desc(data, idx, axis), {"InputTensor": data, "IndicesTensor": idx}


def _gather_elements(
    rng: np.random.Generator, dt: np.dtype, it: np.dtype
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    data = random_data(rng, (5, 6, 7), dt)
    axis = int(rng.integers(0, 3))
    shape = list(data.shape)
    shape[axis] = 4
    idx = random_indices(rng, tuple(shape), data.shape[axis], it)
    return gather_elements_desc(data, idx, axis), {"InputTensor": data, "IndicesTensor": idx}


def _gather_nd(
    rng: np.random.Generator, dt: np.dtype, it: np.dtype
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    data = random_data(rng, (3, 5, 6, 2), dt)
    batch = int(rng.integers(0, 2))
    t = int(rng.integers(1, 4 - batch))
    idx = random_indices(rng, (3, 7, t), data.shape[batch : batch + t], it)
    return gather_nd_desc(data, idx, batch), {"InputTensor": data, "IndicesTensor": idx}


def _scatter(
    rng: np.random.Generator, dt: np.dtype, it: np.dtype
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    data = random_data(rng, (4, 5, 6), dt)
    axis = int(rng.integers(0, 3))
    shape = list(data.shape)
    shape[axis] = 3  # random indices: duplicates on purpose, so the order of writes shows
    idx = random_indices(rng, tuple(shape), data.shape[axis], it)
    updates = random_data(rng, idx.shape, dt)
    return scatter_desc(data, idx, axis), {
        "InputTensor": data,
        "IndicesTensor": idx,
        "UpdatesTensor": updates,
    }


def _scatter_nd(
    rng: np.random.Generator, dt: np.dtype, it: np.dtype
) -> tuple[OperatorDesc, dict[str, np.ndarray]]:
    data = random_data(rng, (4, 5, 3), dt)
    t = int(rng.integers(1, 4))
    idx = random_indices(rng, (9, t), data.shape[:t], it)
    updates = random_data(rng, (9, *data.shape[t:]), dt)
    return scatter_nd_desc(data, idx), {"InputTensor": data, "IndicesTensor": idx, "UpdatesTensor": updates}


CASES: dict[str, Case] = {
    "gather": _gather,
    "gather_elements": _gather_elements,
    "gather_nd": _gather_nd,
    "scatter": _scatter,
    "scatter_nd": _scatter_nd,
}

OPTIONS = {
    "error": KernelOptions(),
    "clamp": KernelOptions(index_mode=IndexMode.CLAMP),
    "fl2_1": KernelOptions(feature_level=FeatureLevel.FL_2_1),
    "no_duplicates": KernelOptions(detect_duplicates=False),
}


def _spoil(rng: np.random.Generator, idx: np.ndarray, how: str, dim: int) -> np.ndarray:
    """One index made out of range (``high``), very negative (``low``) or the largest value of its type."""
    flat = idx.reshape(-1).copy()
    at = int(rng.integers(0, flat.size))
    if how == "high":
        flat[at] = dim + int(rng.integers(0, 3))
    elif how == "low":
        flat[at] = -dim - 1 if idx.dtype.kind == "i" else np.iinfo(idx.dtype).max
    else:
        flat[at] = np.iinfo(idx.dtype).max
    return flat.reshape(idx.shape)


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("option", list(OPTIONS))
def test_random_cases_equal_the_numpy_kernels(op: str, option: str) -> None:
    """Every data type by every index type, valid and spoilt indices: outputs, duplicate counts, error
    classes and messages all equal the numpy kernels'."""
    rng = np.random.default_rng(abs(hash((op, option))) % 2**32)
    options = OPTIONS[option]
    taken = dict(TAKEN)
    for dt in DATA_DTYPES:
        for it in INDEX_DTYPES:
            desc, arrays = CASES[op](rng, dt, it)
            for spoil in ("none", "high", "low", "max"):
                if spoil != "none":
                    dims = [s for s in desc.tensors()["InputTensor"].sizes if s > 1] or [1]
                    arrays = {
                        **arrays,
                        "IndicesTensor": _spoil(rng, arrays["IndicesTensor"], spoil, max(dims)),
                    }
                bound = _bind(desc, arrays)
                assert _outcome(desc, bound, options, "compiled") == _outcome(
                    desc, bound, options, "numpy"
                ), (
                    dt,
                    it,
                    spoil,
                )
    assert sum(TAKEN.values()) > sum(taken.values()), "the compiled kernels took none of the cases"


def test_errors_keep_their_class_and_message() -> None:
    """An out-of-range index raises from the compiled path exactly what the numpy kernel raises."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 3, 1, 2], [1, 0, 2, 2]], dtype=np.int64)
    desc = gather_elements_desc(data, idx, 0)
    bound = _bind(desc, {"InputTensor": data, "IndicesTensor": idx})
    errors = []
    for kernels in ("compiled", "numpy"):
        with pytest.raises(DmlShimError) as info:
            execute(desc, bound, KernelOptions(node="n1"), kernels=kernels)
        errors.append((type(info.value).__name__, str(info.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] == "KernelIndexError"
    assert "IndicesTensor[0, 1] = 3 is out of range" in errors[0][1]
    assert "node 'n1'" in errors[0][1]


def test_duplicate_writes_the_last_wins() -> None:
    """The seed's 1-D example: indices [3, 1, 3, 0] leave the second update for 3, one write overwritten."""
    data = np.zeros(5, dtype=np.float32)
    idx = np.array([3, 1, 3, 0], dtype=np.int64)
    updates = np.array([10, 11, 12, 13], dtype=np.float32)
    desc = scatter_desc(data, idx, 0)
    taken = TAKEN.get("scatter_elements", 0)
    result = execute(desc, _bind(desc, {"InputTensor": data, "IndicesTensor": idx, "UpdatesTensor": updates}))
    assert TAKEN.get("scatter_elements", 0) == taken + 1
    assert result.output.reshape(-1).tolist() == [13, 11, 0, 12, 0]
    assert result.duplicate_indices == 1


def test_chunked_threads_match_onnxruntime() -> None:
    """tests/scripts/chunked_kernels.py (64-element chunks, two kernel threads) with the compiled kernels."""
    root = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "DMLSHIM_KERNELS": "compiled",
        "DMLSHIM_KERNEL_CHUNK": "64",
        "DMLSHIM_KERNEL_THREADS": "2",
        "PYTHONPATH": os.pathsep.join([str(root.parent / "provider"), os.environ.get("PYTHONPATH", "")]),
    }
    script = root / "scripts" / "chunked_kernels.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 9 and all(line.startswith("ok ") for line in lines), done.stdout


def test_conformance_suite_at_5_0_is_unchanged() -> None:
    """The ONNX backend suite's gather/scatter cases give the committed statuses with the compiled kernels."""
    from dmlshim.conformance.backend_suite import run_suite
    from tests.test_conformance import EXPECTED_5_0

    taken = sum(TAKEN.values())
    result = run_suite(FeatureLevel.FL_5_0)
    statuses = {c.name: c.status for c in result.cases}
    assert {n: s for n, s in statuses.items() if n in EXPECTED_5_0} == EXPECTED_5_0
    assert sum(TAKEN.values()) > taken


def test_cache_is_in_the_user_cache_folder() -> None:
    """numba's files go to dmlshim's user cache folder, never beside the package or in the working folder."""
    from dmlshim.kernels.compiled import cache
    from dmlshim.portable import user_cache_dir

    assert cache.FOLDER is not None
    assert Path(cache.FOLDER) == Path(user_cache_dir()) / "numba"
    assert list(Path(cache.FOLDER).glob("loops.*.nbi")), "nothing cached"
    package = Path(cache.__file__).parent
    assert not list(package.rglob("*.nbi")) and not list(package.rglob("*.nbc"))
    assert not list(Path.cwd().glob("**/loops.*.nbi"))


def test_modes() -> None:
    """DMLSHIM_KERNELS: numpy runs the numpy kernels; an unknown value is refused by use()."""
    assert compiled.selected() == "compiled"
    with pytest.raises(ValueError, match="unknown kernels"):
        compiled.use("fast")
    env = {**os.environ, "DMLSHIM_KERNELS": "numpy"}
    code = "from dmlshim.kernels import compiled; print(compiled.selected())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "numpy", done.stderr


AUTO_SCRIPT = """
import sys
import numpy as np
from dmlshim.kernels import compiled, execute
from tests.test_kernels_support import gather_elements_desc
def run(rows):
    data = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    idx = np.zeros((rows, 4), dtype=np.int64)
    desc = gather_elements_desc(data, idx, 1)
    execute(desc, {"InputTensor": data, "IndicesTensor": idx})
run(8)
print("small", "numba" in sys.modules)
run(compiled.AUTO_MIN_ELEMENTS // 4)
print("large", "numba" in sys.modules, compiled.selected())
"""


def test_auto_loads_numba_at_the_first_large_call() -> None:
    """DMLSHIM_KERNELS=auto: small calls leave numba unimported; the first large one loads it."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "DMLSHIM_KERNELS": "auto"}
    done = subprocess.run(
        [sys.executable, "-c", AUTO_SCRIPT], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert done.stdout.split("\n")[:2] == ["small False", "large True compiled"], done.stderr[-2000:]
