"""The benchmark's targets (met or not, with offenders) and its markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.common import NA, size_label
from bench.common import fmt as _fmt
from bench.model_report import model_tables, model_targets

TARGETS = (
    ("kernel <= 1.5x onnxruntime CPU (default options)", "ratio_ort", 1.5, "max"),
    ("kernel >= 20x faster than onnx.reference", "reference_speedup", 20.0, "min"),
    ("kernel >= 20x faster than the custom-op bridge", "bridge_speedup", 20.0, "min"),
    ("kernel peak memory <= 1.5x input+output bytes", "memory_ratio", 1.5, "max"),
)

FIXED_COST_TARGET_MS = 0.030
"""Per-call fixed cost of a kernel on 4K-element tensors: at most 30 us."""


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target of issue 6, evaluated at the largest kernel size, met or not, with the offenders."""
    out: list[dict[str, Any]] = []
    kernels = [r for r in rows if r.get("section") == "kernel" and "error" not in r]
    if kernels:
        largest = max(r["elements"] for r in kernels)
        top = [r for r in kernels if r["elements"] == largest]
        for label, key, limit, kind in TARGETS:
            values = [(r["case"], r[key]) for r in top if r.get(key) is not None]
            if not values:
                out.append({"target": label, "size": largest, "met": None, "worst": NA, "offenders": []})
                continue
            bad = [(c, v) for c, v in values if (v > limit if kind == "max" else v < limit)]
            worst = max(values, key=lambda cv: cv[1]) if kind == "max" else min(values, key=lambda cv: cv[1])
            out.append(
                {
                    "target": label,
                    "size": largest,
                    "met": not bad,
                    "worst": f"{worst[0]}: {worst[1]}",
                    "offenders": [f"{c}: {v}" for c, v in bad],
                }
            )
        smallest = min(r["elements"] for r in kernels)
        small = [(r["case"], r["ours_ms"]) for r in kernels if r["elements"] == smallest and r.get("ours_ms")]
        if smallest <= 8192 and small:
            bad = [(c, v) for c, v in small if v > FIXED_COST_TARGET_MS]
            worst = max(small, key=lambda cv: cv[1])
            out.append(
                {
                    "target": f"kernel per-call cost at {size_label(smallest)} elements <= 30 us",
                    "size": smallest,
                    "met": not bad,
                    "worst": f"{worst[0]}: {worst[1] * 1e3:.1f} us",
                    "offenders": [f"{c}: {v * 1e3:.1f} us" for c, v in bad],
                }
            )
    out += model_targets(rows)
    for r in rows:
        if r.get("section") == "translation" and r.get("cold_us_per_node") is not None:
            out.append(
                {
                    "target": "translation < 100 us per node",
                    "size": r["nodes"],
                    "met": r["cold_us_per_node"] < 100,
                    "worst": f"cold {r['cold_us_per_node']} us, cached {r['warm_us_per_node']} us",
                    "offenders": [],
                }
            )
    return out


def markdown(rows: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    """The rows as markdown tables."""
    lines = [
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), kernel threads "
        f"{info['kernel_threads']}; Python {info['python']}, numpy {info['numpy']}, onnxruntime "
        f"{info['onnxruntime']}, onnx {info['onnx']}.",
        "",
    ]
    kernels = [r for r in rows if r.get("section") == "kernel"]
    if kernels:
        lines += [
            "### Kernels (ms per call; ratio = ours / onnxruntime, median of per-round ratios)",
            "",
            "| case | elements | ours | ORT | ORT 1 thr | ours/ORT | ours/ORT 1 thr | compiled "
            "| compiled/ORT | compiled/ORT 1 thr | onnx.reference "
            "| ref/ours | custom-op bridge | bridge/ours | peak MB | peak / (in+out) | same as ORT |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in kernels:
            if "error" in r:
                lines.append(f"| {r['case']} | {size_label(r['elements'])} | {r['error']} |")
                continue
            ref = _fmt(r["reference_ms"], 1) if r["reference_ms"] is not None else r["reference_note"] or "—"
            bridge = _fmt(r["bridge_ms"], 1) if r["bridge_ms"] is not None else r["bridge_note"] or "—"
            lines.append(
                f"| {r['case']} | {size_label(r['elements'])} | {_fmt(r['ours_ms'], 3)} "
                f"| {_fmt(r['ort_ms'], 3)} | {_fmt(r['ort1_ms'], 3)} | {_fmt(r['ratio_ort'])} "
                f"| {_fmt(r['ratio_ort1'])} | {_fmt(r.get('compiled_ms'), 3)} "
                f"| {_fmt(r.get('compiled_ratio_ort'))} | {_fmt(r.get('compiled_ratio_ort1'))} | {ref} "
                f"| {_fmt(r['reference_speedup'], 0)} | {bridge} "
                f"| {_fmt(r['bridge_speedup'], 0)} | {_fmt(r['peak_mb'], 1)} | {_fmt(r['memory_ratio'])} "
                f"| {_fmt(r['match'] and r.get('compiled_match') is not False)} |"
            )
        lines.append("")
    lines += model_tables(rows)
    for r in rows:
        if r.get("section") == "translation":
            lines += ["### Translation", ""]
            if r.get("cold_us_per_node") is None:
                lines += [f"translate_model: {r.get('note', NA)}", ""]
                continue
            lines += [
                "| nodes | translated | cold us/node | cached us/node | of which shape inference us/node "
                "| lowest feature level, on first read us/node |",
                "|---:|---:|---:|---:|---:|---:|",
                f"| {r['nodes']} | {r['translated']} | {r['cold_us_per_node']} | {r['warm_us_per_node']} "
                f"| {r['shape_inference_us_per_node']} | {r.get('lowest_level_us_per_node', NA)} |",
                "",
            ]
    goals = targets(rows)
    if goals:
        lines += ["### Targets", "", "| target | met | worst | over the limit |", "|---|---|---|---|"]
        for g in goals:
            met = "n/a" if g["met"] is None else ("yes" if g["met"] else "NO")
            lines.append(f"| {g['target']} | {met} | {g['worst']} | {', '.join(g['offenders']) or '—'} |")
        lines.append("")
    return "\n".join(lines)
