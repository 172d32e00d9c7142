"""Session creation in a fresh process: its time and the peak memory it adds.

Run as ``python bench/build_probe.py {ort|partitioned|customop} MODEL [--imported]``; prints a JSON object
``{"seconds", "cpu_seconds", "base_mb", "peak_mb", "added_mb"}``. The peak resident size is read after the
imports (base) and after the session exists (peak), so ``added_mb`` is what building the session cost.
``--imported`` imports dmlshim's session modules and the engine's before the clock starts (the build
alone, as ``realistic.py`` times it); without it their first use is part of the build.

``settled_cpu_seconds`` is the process's CPU from the build's start until :data:`SETTLE` seconds after it
returned: onnxruntime's intra-op thread pool, made with each session, spins on its threads for some
20 ms of CPU after the session is built (``session.intra_op.allow_spinning``, on by default), after
``cpu_seconds`` is read for a session built inline, but inside it for dmlshim's check session, built on
another thread while dmlshim's build goes on. The settled figure counts that spin on both sides.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


SETTLE = 0.2
"""Seconds waited after the build before reading the settled CPU (the spin lasts under 0.1 s)."""


def _peak_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    engine, model = argv[:2]
    import onnxruntime as ort

    import dmlshim

    if "--imported" in argv[2:]:
        _ = dmlshim.InferenceSession  # the first use imports the session modules (and onnx)
        if engine != "ort":  # and the engine's own modules, which its first build imports
            from dmlshim.execute.engine import get_engine_factory

            get_engine_factory(engine)

    base = _peak_mb()
    start, cpu = time.perf_counter(), time.process_time()
    if engine == "ort":
        options = ort.SessionOptions()
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    else:
        session = dmlshim.InferenceSession(model, engine=engine)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu  # every thread's: what a shared machine's load does not inflate
    peak = _peak_mb()
    time.sleep(SETTLE)  # the thread pools' spin after the build, counted in the settled figure
    settled = time.process_time() - cpu
    del session
    result = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "settled_cpu_seconds": settled,
        "base_mb": base,
        "peak_mb": peak,
    }
    print(json.dumps(result | {"added_mb": peak - base}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
