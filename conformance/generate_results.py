"""Regenerate conformance/RESULTS.md from the library (the same objects ``dmlshim conformance`` prints).

Usage, from the repository root::

    python conformance/generate_results.py            # writes conformance/RESULTS.md
    python conformance/generate_results.py --check    # exit 1 if the committed file is out of date

The WebNN totals come from the cases dmlshim ships (``$DMLSHIM_WEBNN_CASES`` names another file). A part
that could not run is an error (exit 2): the committed tables are never replaced by a "Not run" line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnxruntime as ort

from dmlshim.conformance import webnn as webnn_cases
from dmlshim.conformance.backend_suite import suite_by_level
from dmlshim.fileio import files
from dmlshim.report.conformance_report import render_results_markdown, versions, webnn_totals

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    parser.add_argument("-o", "--output", type=Path, default=RESULTS, help=f"the file (default {RESULTS})")
    args = parser.parse_args(argv)
    ort.set_default_logger_severity(3)
    try:
        webnn_cases.load_cases()
    except webnn_cases.WebnnCasesFileError as exc:
        print(f"generate_results: {exc}; {args.output} is left as it is", file=sys.stderr)
        return 2
    results = suite_by_level()
    webnn = webnn_totals()
    if webnn is None:
        print(
            f"generate_results: the WebNN cases did not run; {args.output} is left as it is",
            file=sys.stderr,
        )
        return 2
    text = render_results_markdown(results, webnn, versions=versions())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is out of date: run conformance/generate_results.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    files.write_text(args.output, text, overwrite=True, what="results file")
    print(f"wrote {args.output}")
    return 0 if all(r.passed for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
