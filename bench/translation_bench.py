"""Translation section: translate_model per node, cold and cached, on a generated many-node model."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.common import NA, Config, error_note
from bench.models import many_nodes_model


def bench_translation(config: Config) -> list[dict[str, Any]]:
    """translate_model on a generated model of many distinct gather/scatter nodes."""
    count = config.translation_nodes
    row: dict[str, Any] = {"section": "translation", "nodes": count}
    try:
        from dmlshim.translate import infer_shapes, translate_model
    except Exception as e:
        row["note"] = NA if isinstance(e, ImportError) else error_note(e)
        return [row]
    model = many_nodes_model(count)
    translate_model(many_nodes_model(12))  # imports, schema tables and first-use setup
    clear = _translation_cache_clear()
    cold, warm, shapes, lowest = [], [], [], []
    result = None
    for _ in range(3 if config.rounds > 5 else 1):
        start = time.perf_counter()
        infer_shapes(model, None)
        shapes.append(time.perf_counter() - start)
        if clear is not None:
            clear()
        start = time.perf_counter()
        result = translate_model(model)
        cold.append(time.perf_counter() - start)
        # The lowest feature level of each node is computed when first read (reports, JSON), not by
        # translate_model: time that separately.
        start = time.perf_counter()
        _ = [node.min_feature_level for node in result.nodes]
        lowest.append(time.perf_counter() - start)
        start = time.perf_counter()
        translate_model(model)
        warm.append(time.perf_counter() - start)
    assert result is not None
    summary = result.summary
    row.update(
        {
            "translated": summary.get("dml"),
            "gather_scatter_nodes": summary.get("gather_scatter_nodes"),
            "cold_us_per_node": round(statistics.median(cold) * 1e6 / count, 1),
            "warm_us_per_node": round(statistics.median(warm) * 1e6 / count, 1),
            "shape_inference_us_per_node": round(statistics.median(shapes) * 1e6 / count, 1),
            "lowest_level_us_per_node": round(statistics.median(lowest) * 1e6 / count, 1),
            "note": "" if clear is not None else "translation cache not found: cold = first call",
        }
    )
    return [row]


def _translation_cache_clear() -> Callable[[], None] | None:
    """The translator's cache reset, if it has one (cold timings must not hit it)."""
    try:
        from dmlshim.translate import translator
    except ImportError:
        return None
    cached = getattr(translator, "_translate", None)
    return getattr(cached, "cache_clear", None)
