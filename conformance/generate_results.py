"""Regenerate conformance/RESULTS.md from the library (the same objects ``dmlshim conformance`` prints).

Usage, from the repository root::

    python conformance/generate_results.py            # writes conformance/RESULTS.md
    python conformance/generate_results.py --check    # exit 1 if the committed file is out of date

The WebNN totals are included when ``../shared/conformance/webnn_wpt_cases.json`` (or
``$DMLSHIM_WEBNN_CASES``) is present.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnxruntime as ort

from dmlshim.conformance.backend_suite import suite_by_level
from dmlshim.report.conformance_report import render_results_markdown, versions, webnn_totals

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args()
    ort.set_default_logger_severity(3)
    results = suite_by_level()
    text = render_results_markdown(results, webnn_totals(), versions=versions())
    if args.check:
        current = RESULTS.read_text() if RESULTS.is_file() else ""
        if current != text:
            print(f"{RESULTS} is out of date: run python conformance/generate_results.py", file=sys.stderr)
            return 1
        print(f"{RESULTS} is up to date")
        return 0
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}")
    return 0 if all(r.passed for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
