"""One case of a computed-sizes models module, run in a child process under a memory limit: the child
prints ``VALUE shape`` or ``REFUSED class node op | message``, then ``PEAK_MB n`` (its own VmHWM: Linux keeps
``ru_maxrss`` across fork and execve, so a child of a large test process would report its parent's peak)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .oracle import ort_session

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import importlib, resource, sys
import numpy as np
sys.path.insert(0, sys.argv[4])
models = importlib.import_module(sys.argv[6])
import dmlshim
case, engine, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if engine == "dropin":
    dmlshim.install()
    import onnxruntime
    providers = ["DmlExecutionProvider", "CPUExecutionProvider"]
    session = onnxruntime.InferenceSession(models.model(case), providers=providers)
else:
    session = dmlshim.InferenceSession(models.model(case), engine=engine)
try:
    out = session.run(None, models.feeds(case, n))[0]
    np.save(sys.argv[5], out)
    print("VALUE", out.shape)
except dmlshim.errors.DmlShimError as exc:
    print("REFUSED", type(exc).__name__, exc.node, exc.op_type, "|", exc)
try:
    with open("/proc/self/status") as status:
        peak_kb = int(next(l.split()[1] for l in status if l.startswith("VmHWM:")))
except OSError:
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("PEAK_MB", peak_kb // 1024)
"""


def run_case(models: str, case: str, engine: str, n: int, out: Path, limit: str) -> str:
    """Run ``case`` of the module ``models`` (in tests/) on ``engine`` with ``n`` as its size feed under
    ``DMLSHIM_MEMORY_LIMIT=limit``; the child's output (it saves a value to ``out``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "provider"), "DMLSHIM_MEMORY_LIMIT": limit}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, case, engine, str(n), str(ROOT / "tests"), str(out), models],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def gives_onnxruntimes_values(models: str, case: str, engine: str, out: Path, limit: str) -> None:
    """``case`` with a small size feed (400), run in a child under the limit, gives onnxruntime CPU's value
    (computed here from the module's own model and feeds)."""
    stdout = run_case(models, case, engine, 400, out, limit)
    assert "VALUE" in stdout, stdout
    module = importlib.import_module(f"{__package__}.{models}")
    want = ort_session(module.model(case)).run(None, module.feeds(case, 400))[0]
    got = np.load(out)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
