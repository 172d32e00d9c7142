"""``dmlshim inspect``'s CPU with and without the graph-column shortcuts (issue 35, item 3, sixth round),
alternating in one process so that both sides see the same load.

Usage::

    python bench/inspect_walks_ab.py MODEL.onnx [--rounds 5]

"Walks" turns the shortcuts off (each then walks as before): ``_add_ort_types``' rank test,
``unknown_operators``' op columns and ``session_refusals``' byte search for refused ops. Prints the process
CPU of each ``inspect -q`` run (after one warm-up of each side) and the least of each side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def _walks() -> Iterator[None]:
    from dmlshim.model import ort_errors
    from dmlshim.translate import ep_refusals, shapes_info

    saved = (shapes_info._may_lack_ranks, ort_errors.flat_ops, ep_refusals.op_types_among)
    shapes_info._may_lack_ranks = lambda graph: True
    ort_errors.flat_ops = lambda graph: None
    ep_refusals.op_types_among = lambda graph, wanted: frozenset(wanted)
    try:
        yield
    finally:
        shapes_info._may_lack_ranks, ort_errors.flat_ops, ep_refusals.op_types_among = saved


def _inspect(model: str) -> float:
    from dmlshim.cli.main import main

    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["inspect", "-q", model])
    spent = time.process_time() - start
    if code != 0:
        raise SystemExit(f"inspect exited {code}")
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "provider"))  # this checkout's: an installed dmlshim may lack the shortcuts
    spent: dict[str, list[float]] = {"walks": [], "columns": []}
    for round_ in range(args.rounds + 1):
        for side in ("walks", "columns"):
            with _walks() if side == "walks" else contextlib.nullcontext():
                seconds = _inspect(args.model)
            if round_:  # the first round warms both sides up
                spent[side].append(seconds)
    for side, values in spent.items():
        print(f"{side:8} least {min(values):.2f} s CPU  ({', '.join(f'{v:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
