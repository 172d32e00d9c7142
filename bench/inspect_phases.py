"""Where ``dmlshim inspect``'s CPU goes, phase by phase (issue 35): process CPU seconds (every thread's,
so onnxruntime's session build on its own thread counts where it is waited for) spent inside each of a
fixed list of functions, inclusive, counted once per outermost call.

Usage::

    python bench/inspect_phases.py MODEL.onnx [--json] [--repeat 1]

Run with the checkout's ``provider/`` first on ``PYTHONPATH`` (the default here) or another one's to
compare. The phases are looked up by name, so a phase a checkout lacks is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

PHASES = (
    "dmlshim.execute.model_source:load_model",
    "dmlshim.model.modelcheck:check_model",
    "dmlshim.model.wellformed:check_well_formed",
    "dmlshim.fileio.external_data:external_tensors",
    "dmlshim.model.modelcheck:ort_accepts",
    "dmlshim.model.modelcheck:_onnx_checker_findings",
    "dmlshim.model.prepare:prepare_model",
    "dmlshim.translate.model_translation:translate_model",
    "dmlshim.translate.shapes_info:infer_shapes",
    "dmlshim.model.data_prop:infer_with_data_prop",
    "dmlshim.model.last_inference:infer_shapes",
    "dmlshim.translate.ep_refusals:session_refusals",
    "dmlshim.cli.inspect_cmd:graph_values",
    "dmlshim.model.ort_errors:unknown_operators",
    "dmlshim.report.inspect_report:render_text",
    "dmlshim.report.inspect_report:write_json",
)


def _wrap(spent: dict[str, list[float]], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    active = [0]

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if active[0]:
            return func(*args, **kwargs)
        active[0] += 1
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            active[0] -= 1
            row = spent.setdefault(name, [0.0, 0])
            row[0] += time.process_time() - start
            row[1] += 1

    return timed


def _install(spent: dict[str, list[float]]) -> None:
    for phase in PHASES:
        module_name, attr = phase.split(":")
        try:
            module = importlib.import_module(module_name)
            original = getattr(module, attr)
        except (ImportError, AttributeError):
            continue
        timed = _wrap(spent, phase, original)
        for loaded in list(sys.modules.values()):  # every ``from x import f`` binding too
            namespace = getattr(loaded, "__dict__", None)
            if not namespace or not str(getattr(loaded, "__name__", "")).startswith("dmlshim"):
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    setattr(loaded, key, timed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--json", action="store_true", help="time `inspect --json` instead of the text")
    args = parser.parse_args(argv)
    start = time.process_time()
    if str(REPO / "provider") not in sys.path:
        sys.path.append(str(REPO / "provider"))
    from dmlshim.cli.main import main as cli_main

    importlib.import_module("dmlshim.cli.inspect_cmd")
    imported = time.process_time() - start
    spent: dict[str, list[float]] = {}
    _install(spent)
    out = io.StringIO()
    begin = time.process_time()
    with contextlib.redirect_stdout(out):
        code = cli_main(["inspect", "-q", *(["--json"] if args.json else []), args.model])
    total = time.process_time() - begin
    print(f"imports {imported:.2f} s CPU; inspect (exit {code}) {total:.2f} s CPU")
    for phase in PHASES:
        if phase in spent:
            seconds, calls = spent[phase]
            print(f"  {phase:<58} {seconds:6.2f} s  x{calls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
