"""``dmlshim conformance``: the ONNX backend node tests for gather/scatter, run through dmlshim.

Exit codes: 0 no case failed, 1 some case failed, 2 usage or a shrunken test corpus.
"""

from __future__ import annotations

import argparse
import json
import sys

from .options import add_engine, add_feature_level
from .progress import Progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``dmlshim conformance``."""
    add_feature_level(parser, "emulated")
    add_engine(parser)
    parser.add_argument(
        "--all-levels",
        action="store_true",
        help="run at 5_0, 3_0 and 2_1 (with --markdown: the conformance/RESULTS.md document, WebNN included)",
    )
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the JSON document")
    fmt.add_argument("--markdown", action="store_true", help="print Markdown")


def run(args: argparse.Namespace) -> int:
    """Run the suite; returns the exit code."""
    import onnxruntime as ort

    from ..conformance.backend_suite import SUITE_LEVELS, discover_cases, run_suite
    from ..report import conformance_report as cr

    # onnxruntime's own C++ log (e.g. TensorScatter's in-place notice) would interleave with the table.
    ort.set_default_logger_severity(3)
    levels = SUITE_LEVELS if args.all_levels else (args.feature_level,)
    progress = Progress.for_args(args)
    progress.update("conformance: collecting the ONNX backend node tests")
    cases = discover_cases()
    results = {}
    for i, level in enumerate(levels, 1):
        progress.update(f"conformance: {level.dml_name} ({i} of {len(levels)}, {len(cases)} cases)")
        results[level] = run_suite(level, cases, args.engine)
    progress.clear()
    if args.json:
        docs = [r.to_json() for r in results.values()]
        doc = {"schema_version": 1, "levels": docs} if args.all_levels else docs[0]
        print(json.dumps(doc, indent=2))
    elif args.markdown:
        if args.all_levels:
            with progress.status("conformance: the WebNN cases, in both index modes"):
                webnn = cr.webnn_totals()
            sys.stdout.write(cr.render_results_markdown(results, webnn, versions=cr.versions()))
        else:
            print(cr.render_markdown(next(iter(results.values()))))
    else:
        print("\n\n".join(cr.render_text(r) for r in results.values()))
    return 0 if all(r.passed for r in results.values()) else 1
