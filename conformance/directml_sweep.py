"""Fidelity sweep on real DirectML: generated gather/scatter nodes replayed on DirectML.dll.

    python conformance/directml_sweep.py [--quick] [--wide] [--strided] [--seed N] [--out DIR]
        [--stack stack.json] [--json FILE]

Every case is translated as dmlshim translates it, written as the DxDispatch folder `dmlshim export`
writes, replayed on DirectML.dll by the replay host (under Wine) and compared with dmlshim's kernels
(docs/replay.md, "The fidelity sweep"). Exit status: 0 when every difference is explained, 1 when one
is not (or DirectML refused a descriptor), 2 when real DirectML is not set up (0 with --skip-if-missing).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fifth of the cases (every op and kind kept)")
    parser.add_argument("--out", help="keep the case folders here (new or empty); default: temporary")
    parser.add_argument("--stack", help="the stack.json to use (default: the one in dmlshim's cache folder)")
    parser.add_argument("--json", dest="json_path", help="also write the outcomes as JSON to this file")
    parser.add_argument("--no-ort", action="store_true", help="skip the onnxruntime CPU cross-check")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="add the wide set (dmlshim.dxdispatch.sweep_wide): ~500 more cases",
    )
    parser.add_argument(
        "--strided",
        action="store_true",
        help="also replay strided descriptors (dmlshim.dxdispatch.sweep_strided): a third of the check "
        "cases with transposed, padded and broadcast input layouts and other index types",
    )
    parser.add_argument("--seed", type=int, default=2024, help="the case generator's seed (default 2024)")
    parser.add_argument("--skip-if-missing", action="store_true", help="exit 0 if DirectML is not set up")
    args = parser.parse_args(argv)

    from dmlshim.dxdispatch.directml_sweep import FAIL, OBSERVED, SKIPPED, run_sweep
    from dmlshim.dxdispatch.host_stack import StackMissingError, load_stack
    from dmlshim.dxdispatch.sweep_cases import sweep_cases
    from dmlshim.dxdispatch.sweep_wide import wide_sweep
    from dmlshim.fileio.files import write_json

    try:
        stack = load_stack(args.stack)
    except StackMissingError as exc:
        print(f"directml_sweep: skipped: {exc.message} ({exc.path})")
        return 0 if args.skip_if_missing else 2

    start = time.monotonic()
    cases = wide_sweep(args.seed, quick=args.quick) if args.wide else sweep_cases(args.seed, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="dmlshim-sweep-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "sweep"
        if out.exists() and any(out.iterdir()):
            print(f"directml_sweep: {out} is not empty", file=sys.stderr)
            return 2
        report = run_sweep(cases, out, stack=stack, with_ort=not args.no_ort)
        strided = _strided(args.seed, out / "_strided", stack) if args.strided else []
    total = time.monotonic() - start

    device = report.replay.device.describe() if report.replay else "no device (nothing to run)"
    print(f"real DirectML: {device}")
    by_op: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in report.outcomes:
        by_op[(o.op_type, o.feature_level)][o.verdict] += 1
    verdicts = ["pass", "explained", "observed", "fail", "skipped"]
    print(f"{'op':16} {'FL':5} " + " ".join(f"{v:>9}" for v in verdicts))
    for (op, fl), counts in sorted(by_op.items()):
        print(f"{op:16} {fl:5} " + " ".join(f"{counts[v]:>9}" for v in verdicts))
    for o in report.outcomes:
        if o.verdict in (FAIL, OBSERVED) or (o.verdict == "explained"):
            print(f"  {o.verdict:9} {o.case} ({o.operator}): {o.detail}")
    ort_bad = [o.case for o in report.outcomes if o.onnxruntime is False]
    if ort_bad:
        print(f"  dmlshim differs from onnxruntime CPU on: {', '.join(ort_bad)}")
    counts = report.counts()
    print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['explained']} explained, "
        f"{counts['observed']} observed, {counts[SKIPPED]} skipped of {len(report.outcomes)} case(s) "
        f"in {total:.0f} s (write {report.seconds_build:.0f} s, DirectML {report.seconds_replay:.0f} s)"
    )
    for o in strided:
        if o.verdict != "pass":
            print(f"  {o.verdict:9} {o.case} (strided): {o.detail}")
    if strided:
        n_pass = sum(o.verdict == "pass" for o in strided)
        print(f"strided descriptors: {n_pass} passed, {len(strided) - n_pass} failed of {len(strided)}")
    if args.json_path:
        write_json(
            Path(args.json_path),
            {
                "device": report.replay.device.to_json() if report.replay else None,
                "seconds": round(total, 1),
                "counts": counts,
                "outcomes": [o.to_json() for o in report.outcomes],
                "strided": [dict(o.__dict__) for o in strided],
            },
            overwrite=True,
        )
    strided_ok = all(o.verdict == "pass" for o in strided)
    return 0 if report.ok and strided_ok and not any(o.verdict == FAIL for o in report.outcomes) else 1


def _strided(seed: int, directory: Path, stack: object) -> list:
    from dmlshim.dxdispatch.sweep_strided import run_strided, strided_cases

    return run_strided(strided_cases(seed), directory, stack=stack)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
