"""Targets and tables of the whole-model section (issue 14's model targets)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.common import fmt as _fmt


def _target(
    label: str, values: list[tuple[str, float]], limit: float, summary: str = "max"
) -> dict[str, Any]:
    """``values`` (name, ratio) against ``limit``: the worst one, or the median when ``summary`` says so."""
    if not values:
        return {"target": label, "size": None, "met": None, "worst": "n/a", "offenders": []}
    if summary == "median":
        median = statistics.median(v for _, v in values)
        return {
            "target": label,
            "size": None,
            "met": median <= limit,
            "worst": f"median {median:.3f}",
            "offenders": [],
        }
    bad = [(n, v) for n, v in values if v > limit]
    worst = max(values, key=lambda nv: nv[1])
    return {
        "target": label,
        "size": None,
        "met": not bad,
        "worst": f"{worst[0]}: {worst[1]}",
        "offenders": [f"{n}: {v}" for n, v in bad],
    }


def model_targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole-model targets, per machine load: median and worst run-time ratio, latency spread,
    session build time and memory, the custom-op engine against the partitioned one."""
    out: list[dict[str, Any]] = []
    models = [r for r in rows if r.get("section") == "model" and "error" not in r]
    for load in sorted({r.get("load", "idle") for r in models}):
        here = [r for r in models if r.get("load", "idle") == load]
        sample = [
            (r["model"], r["ratio_partitioned"])
            for r in here
            if r.get("ratio_partitioned") is not None and " @ " not in r["model"]
        ]
        large = [
            (r["model"], r["ratio_partitioned"])
            for r in here
            if r.get("ratio_partitioned") is not None and " @ " in r["model"]
        ]
        spread = [(r["model"], r["spread_ratio"]) for r in here if r.get("spread_ratio") is not None]
        out += [
            _target(f"models ({load}): median ratio <= 1.5x onnxruntime CPU", sample, 1.5, "median"),
            _target(f"models ({load}): worst ratio <= 3x onnxruntime CPU", sample, 3.0),
            _target(f"models ({load}): at 4M-element inputs <= 1.2x", large, 1.2),
            _target(f"models ({load}): p90/p50 spread <= 1.5x onnxruntime's", spread, 1.5),
        ]
        if load == "idle":
            build = [(r["model"], r["build_ratio"]) for r in here if r.get("build_ratio") is not None]
            memory = [
                (r["model"], r["build_memory_ratio"]) for r in here if r.get("build_memory_ratio") is not None
            ]
            custom = [
                (r["model"], r["ratio_customop_partitioned"])
                for r in here
                if r.get("ratio_customop_partitioned") is not None
            ]
            out += [
                _target("session build <= 2x onnxruntime's", build, 2.0),
                _target("session build peak memory <= 1.5x onnxruntime's", memory, 1.5),
                _target("custom-op engine <= 3x the partitioned engine", custom, 3.0),
            ]
    return out


def model_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines: one whole-model table per machine load."""
    lines: list[str] = []
    models = [r for r in rows if r.get("section") == "model"]
    for load in sorted({r.get("load", "idle") for r in models}):
        lines += [
            f"### Whole models, machine {load} "
            "(ms per run; ratio = dmlshim partitioned engine / onnxruntime CPU)",
            "",
            "| model | ORT | dmlshim | ratio | ORT p50 / p90 | dmlshim p50 / p90 | spread vs ORT | build ORT "
            "| build dmlshim | build MB ORT | build MB dmlshim | custom-op / partitioned | emulated | same |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in (r for r in models if r.get("load", "idle") == load):
            if "error" in r:
                lines.append(f"| {r['model']} | {r['error']} |")
                continue
            dml = (
                _fmt(r.get("partitioned_ms"), 3)
                if r.get("partitioned_ms") is not None
                else r.get("partitioned_note", "—")
            )
            emulated = f"{r['emulated_nodes']}/{r['gather_scatter_nodes']}" if "emulated_nodes" in r else "—"
            custom = (
                _fmt(r.get("ratio_customop_partitioned"))
                if r.get("ratio_customop_partitioned")
                else (r.get("customop_note") or "—")
            )
            lines.append(
                f"| {r['model']} | {_fmt(r.get('ort_ms'), 3)} | {dml} | {_fmt(r.get('ratio_partitioned'))} "
                f"| {_fmt(r.get('ort_p50_ms'), 3)} / {_fmt(r.get('ort_p90_ms'), 3)} "
                f"| {_fmt(r.get('partitioned_p50_ms'), 3)} / {_fmt(r.get('partitioned_p90_ms'), 3)} "
                f"| {_fmt(r.get('spread_ratio'))} | {_fmt(r.get('ort_build_ms'), 1)} "
                f"| {_fmt(r.get('partitioned_build_ms'), 1)} | {_fmt(r.get('ort_build_mb'), 1)} "
                f"| {_fmt(r.get('partitioned_build_mb'), 1)} | {custom} | {emulated} "
                f"| {_fmt(r.get('partitioned_match'))} |"
            )
        lines.append("")
    return lines
