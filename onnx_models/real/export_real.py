"""Export the real-architecture corpus in ``onnx_models/real/``.

Every model here is a real network class (transformers, torchvision, or a plain PyTorch module written
the way graph-network libraries write message passing) built from a deliberately tiny configuration with
random weights drawn from a fixed seed: no model hub, no network. Each is exported by the dynamo-based
``torch.onnx.export(..., dynamo=True)`` and, where it works, by the legacy TorchScript exporter
(``dynamo=False``), so the corpus holds the ONNX that both converters write for the same network.

For every export the script writes ``<name>.onnx`` and ``<name>.npz`` (one array per graph input, keyed
by the input's name, no pickles), checks that onnxruntime CPU reproduces the PyTorch output on that
sample and, for models with symbolic dimensions, on a second sample of other sizes, and records the
model in ``manifest.json``.

Regenerate (torch is only an optional extra; tests and the runtime never need it)::

    python3 -m venv venv-export && venv-export/bin/pip install torch==2.13.0   # the CPU wheel
    venv-export/bin/pip install '.[export]'
    venv-export/bin/python onnx_models/real/export_real.py             # transformers + plain torch

    # torchvision needs a torch that its wheel was built against (2.14.1 for torchvision 0.29.1)
    python3 -m venv venv-export-tv
    venv-export-tv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx onnxruntime onnxscript
    venv-export-tv/bin/python onnx_models/real/export_real.py --only torchvision

``--only WORD`` exports the models whose name or group contains WORD; ``--list`` lists them. Models whose
library is not installed are skipped with a message and keep their manifest entry.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

try:
    import torch
except ImportError as exc:  # pragma: no cover - only for people regenerating the files
    raise SystemExit("export_real.py needs torch and onnxscript: pip install '.[export]'") from exc

# The sibling modules (on sys.path when this file is run as a script).
from export_common import Built, Inputs, Spec
from models_decoders import build_gpt2, build_llama_static, build_mixtral, build_qwen2
from models_encoders import (
    build_bart,
    build_bart_decoder_past,
    build_bert,
    build_bert_fp16,
    build_swin,
    build_t5,
    build_whisper,
)
from models_plain import build_beam_step, build_fasterrcnn, build_gnn, build_maskrcnn

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
#: Opsets: 18 for dynamo (its own default is newer; 18 is what onnxruntime >= 1.20 fully runs), 17 for
#: the legacy exporter (its highest well-tested opset).
DYNAMO_OPSET = 18
LEGACY_OPSET = 17
#: IR version cap: what every onnxruntime the project supports (>= 1.20) reads.
MAX_IR_VERSION = 10
#: Every model must stay below this (the corpus is committed).
MAX_BYTES = 2 * 1024 * 1024
GATHER_SCATTER_OPS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")
CONTROL_FLOW_OPS = ("If", "Loop", "Scan")
#: Node metadata kept from the dynamo exporter; the rest (stack traces with local paths) is dropped.
KEPT_METADATA = frozenset({"namespace"})

SPECS: tuple[Spec, ...] = (
    Spec(
        "gpt2_past",
        "transformers",
        "GPT2LMHeadModel",
        "decoder step with past key/values (2 layers)",
        build_gpt2,
    ),
    Spec(
        "qwen2_past", "transformers", "Qwen2ForCausalLM", "GQA decoder step with past key/values", build_qwen2
    ),
    Spec(
        "llama_static_cache",
        "transformers",
        "LlamaForCausalLM",
        "2-token step writing a StaticCache in place (index_copy_) at cache_position",
        build_llama_static,
    ),
    Spec(
        "mixtral_moe",
        "transformers",
        "MixtralForCausalLM",
        "MoE causal LM, top-2 of 4 experts, experts gathered by routed id (batched_mm)",
        build_mixtral,
    ),
    Spec("bert", "transformers", "BertModel", "encoder with padding mask and token types", build_bert),
    # The legacy exporter writes fp16 LayerNormalization with an fp32 scale (onnx rejects the model).
    Spec(
        "bert_fp16",
        "transformers",
        "BertModel",
        "the BERT encoder in float16",
        build_bert_fp16,
        exporters=("dynamo",),
        dtype="float16",
        rtol=2e-2,
        atol=2e-2,
    ),
    Spec("bart", "transformers", "BartForConditionalGeneration", "encoder-decoder forward", build_bart),
    Spec(
        "bart_decoder_past",
        "transformers",
        "BartForConditionalGeneration",
        "decoder step with self-attention past and cross-attention cache",
        build_bart_decoder_past,
    ),
    Spec(
        "t5",
        "transformers",
        "T5ForConditionalGeneration",
        "encoder-decoder with relative position buckets",
        build_t5,
    ),
    Spec(
        "whisper",
        "transformers",
        "WhisperForConditionalGeneration",
        "speech encoder-decoder on log-mel features",
        build_whisper,
        exporters=("dynamo",),
    ),  # legacy: aten::diff has no ONNX symbolic
    Spec(
        "swin",
        "transformers",
        "SwinForImageClassification",
        "windowed attention with relative position bias table",
        build_swin,
    ),
    Spec(
        "gnn_scatter",
        "torch",
        "GCN (plain torch)",
        "message passing with index_select and scatter_add, mean readout per graph",
        build_gnn,
    ),
    Spec(
        "beam_search_step",
        "torch",
        "beam search bookkeeping (plain torch)",
        "torch.gather, advanced indexing, index_put and scatter on beams",
        build_beam_step,
    ),
    Spec(
        "fasterrcnn",
        "torchvision",
        "torchvision FasterRCNN",
        "tiny backbone, RPN + RoIAlign + box head, NMS postprocess",
        build_fasterrcnn,
        exporters=("torchscript",),
    ),
    Spec(
        "maskrcnn",
        "torchvision",
        "torchvision MaskRCNN",
        "FasterRCNN plus mask head and paste-masks Loop",
        build_maskrcnn,
        exporters=("torchscript",),
    ),
)


# --------------------------------------------------------------------------------------------------
# Export, check, record
# --------------------------------------------------------------------------------------------------


def _walk_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk_nodes(attr.g)
            for sub in attr.graphs:
                yield from _walk_nodes(sub)


def clean_model(model: onnx.ModelProto) -> None:
    """Drop the exporter's debugging metadata (stack traces name local paths) and doc strings."""
    for node in _walk_nodes(model.graph):
        node.doc_string = ""
        kept = [p for p in node.metadata_props if p.key in KEPT_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    model.doc_string = ""
    model.graph.doc_string = ""


def op_counts(model: onnx.ModelProto, ops: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in _walk_nodes(model.graph):
        if node.domain in ("", "ai.onnx") and node.op_type in ops:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _expected(built: Built) -> list[tuple[str, Inputs, list[np.ndarray]]]:
    """PyTorch's outputs on the sample(s), computed before exporting: the legacy exporter leaves some
    transformers modules in a state where eager calls give other results."""
    samples = [("sample", built.inputs)]
    if built.other_inputs is not None:
        samples.append(("other sizes", built.other_inputs))
    result = []
    for label, inputs in samples:
        with torch.no_grad():
            out = built.module(*inputs.values())
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        result.append((label, inputs, [_to_numpy(t) for t in outs]))
    return result


def _check(
    path: Path, expected: list[tuple[str, Inputs, list[np.ndarray]]], built: Built, spec: Spec
) -> list[str]:
    """Run the file in onnxruntime CPU against PyTorch on the sample (and the second sample)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    checked = []
    for label, inputs, want_all in expected:
        got = session.run(None, {n: _to_numpy(inputs[n]) for n in names})
        for out_name, want_np, have in zip(built.output_names, want_all, got, strict=True):
            where = f"{path.name} ({label}): {out_name}"
            if want_np.shape != have.shape:
                raise AssertionError(f"{where}: shape {have.shape} != {want_np.shape}")
            if np.issubdtype(want_np.dtype, np.floating):
                np.testing.assert_allclose(
                    have.astype(np.float32),
                    want_np.astype(np.float32),
                    rtol=spec.rtol,
                    atol=spec.atol,
                    err_msg=where,
                )
            else:
                np.testing.assert_array_equal(have, want_np, err_msg=where)
        checked.append(label)
    return checked


def export_one(spec: Spec, exporter: str, out_dir: Path = HERE) -> dict[str, Any]:
    name = f"{spec.name}_{exporter}"
    built = spec.build()
    expected = _expected(built)
    path = out_dir / f"{name}.onnx"
    args = tuple(built.inputs.values())
    names = list(built.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(
                built.module,
                args,
                dynamo=True,
                opset_version=DYNAMO_OPSET,
                input_names=names,
                output_names=list(built.output_names),
                dynamic_shapes=built.dynamo_shapes,
                verbose=False,
            )
            assert program is not None
            model = program.model_proto
            opset = DYNAMO_OPSET
        else:
            tmp = out_dir / f".{name}.tmp.onnx"
            torch.onnx.export(
                built.module,
                args,
                str(tmp),
                dynamo=False,
                opset_version=LEGACY_OPSET,
                input_names=names,
                output_names=list(built.output_names),
                dynamic_axes=built.legacy_axes,
            )
            model = onnx.load(str(tmp))
            tmp.unlink()
            opset = LEGACY_OPSET
    clean_model(model)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    graph_inputs = [i.name for i in model.graph.input]
    npz = out_dir / f"{name}.npz"
    np.savez(npz, **{n: _to_numpy(built.inputs[n]) for n in graph_inputs})
    checked = _check(path, expected, built, spec)
    size = path.stat().st_size
    if size >= MAX_BYTES:
        raise AssertionError(f"{path.name} is {size} bytes, over the corpus limit of {MAX_BYTES}")
    symbolic = sorted(
        {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    )
    import onnxruntime

    versions = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__}
    for lib in ("transformers", "torchvision", "onnxscript"):
        module = sys.modules.get(lib)
        if module is not None:
            versions[lib] = module.__version__
    return {
        "name": name,
        "file": path.name,
        "inputs_file": npz.name,
        "architecture": spec.architecture,
        "group": spec.group,
        "description": spec.description,
        "exporter": exporter,
        "opset": opset,
        "ir_version": model.ir_version,
        "dtype": spec.dtype,
        "onnx_bytes": size,
        "npz_bytes": npz.stat().st_size,
        "nodes": sum(1 for _ in _walk_nodes(model.graph)),
        "gather_scatter_ops": op_counts(model, GATHER_SCATTER_OPS),
        "control_flow_ops": op_counts(model, CONTROL_FLOW_OPS),
        "inputs": {
            i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input
        },
        "symbolic_dims": symbolic,
        "checked_in_onnxruntime": checked,
        "versions": versions,
    }


#: int8 variants: (source export, description). onnxruntime's dynamic quantization stores the MatMul and
#: embedding weights as uint8, so the embedding Gathers read uint8 data followed by DequantizeLinear.
QUANTIZED: tuple[tuple[str, str], ...] = (
    ("bert_dynamo", "the BERT dynamo export after onnxruntime quantize_dynamic (uint8 weights)"),
    ("gpt2_past_torchscript", "the GPT-2 legacy export after onnxruntime quantize_dynamic (uint8 weights)"),
)
#: How far the int8 model may drift from the float32 export it came from (random weights, tiny sizes).
QUANTIZED_ATOL = 0.1


def quantize_one(source: dict[str, Any], description: str, out_dir: Path = HERE) -> dict[str, Any]:
    """Write ``<source>_int8`` from an exported model with onnxruntime's dynamic quantization."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    base, exporter = source["name"].rsplit("_", 1)
    name = f"{base}_int8_{exporter}"
    src, path = out_dir / source["file"], out_dir / f"{name}.onnx"
    tmp = out_dir / f".{name}.tmp.onnx"
    quantize_dynamic(
        src, tmp, weight_type=QuantType.QUInt8, op_types_to_quantize=["MatMul", "Gemm", "Gather"]
    )
    model = onnx.load(str(tmp))
    tmp.unlink()
    clean_model(model)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    npz = out_dir / f"{name}.npz"
    with np.load(out_dir / source["inputs_file"]) as data:
        feeds = {k: data[k] for k in data.files}
    np.savez(npz, **feeds)
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    want = onnxruntime.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, atol=QUANTIZED_ATOL, err_msg=f"{path.name} vs {src.name}")
    size = path.stat().st_size
    if size >= MAX_BYTES:
        raise AssertionError(f"{path.name} is {size} bytes, over the corpus limit of {MAX_BYTES}")
    entry = dict(source)
    entry.update(
        {
            "name": name,
            "file": path.name,
            "inputs_file": npz.name,
            "description": description,
            "dtype": "int8",
            "quantized_from": source["name"],
            "onnx_bytes": size,
            "npz_bytes": npz.stat().st_size,
            "nodes": sum(1 for _ in _walk_nodes(model.graph)),
            "gather_scatter_ops": op_counts(model, GATHER_SCATTER_OPS),
            "control_flow_ops": op_counts(model, CONTROL_FLOW_OPS),
            "checked_in_onnxruntime": [f"sample, within {QUANTIZED_ATOL} of {source['name']}"],
        }
    )
    entry["versions"] = {**source["versions"], "onnxruntime": onnxruntime.__version__}
    return entry


def _load_manifest() -> dict[str, dict[str, Any]]:
    if not MANIFEST.exists():
        return {}
    return {m["name"]: m for m in json.loads(MANIFEST.read_text())["models"]}


def _save_manifest(entries: dict[str, dict[str, Any]]) -> None:
    doc = {
        "description": "Real-architecture ONNX corpus; regenerate with onnx_models/real/export_real.py",
        "models": [entries[k] for k in sorted(entries)],
    }
    MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")


def _group_available(group: str) -> bool:
    try:
        if group == "transformers":
            import transformers  # noqa: F401
        elif group == "torchvision":
            import torchvision  # noqa: F401
    except Exception as exc:  # torchvision raises RuntimeError beside a torch it was not built for
        print(f"skipping {group} models: {exc}", file=sys.stderr)
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="export models whose name/group has WORD")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--traceback", action="store_true", help="print the traceback of a failed export")
    args = parser.parse_args(argv)
    if args.list:
        for spec in SPECS:
            print(f"{spec.name:20} {spec.group:13} {','.join(spec.exporters):20} {spec.architecture}")
        return 0
    entries = _load_manifest()
    available: dict[str, bool] = {}
    failures: list[str] = []
    for spec in SPECS:
        if args.only and not any(w in spec.name or w == spec.group for w in args.only):
            continue
        if spec.group not in available:
            available[spec.group] = _group_available(spec.group)
        if not available[spec.group]:
            continue
        for exporter in spec.exporters:
            name = f"{spec.name}_{exporter}"
            print(f"exporting {name} ...", flush=True)
            try:
                entries[name] = export_one(spec, exporter)
            except Exception as exc:  # report and go on: one exporter failing is itself a finding
                for suffix in (".onnx", ".npz"):
                    (HERE / f"{name}{suffix}").unlink(missing_ok=True)
                lines = [line for line in str(exc).splitlines() if line.strip()]
                first = " / ".join(lines[:3])[:400]
                failures.append(f"{name}: {type(exc).__name__}: {first}")
                print(f"  FAILED {failures[-1]}", flush=True)
                if args.traceback:
                    traceback.print_exc()
                continue
            e = entries[name]
            print(f"  {e['onnx_bytes']} bytes, {e['gather_scatter_ops']} {e['control_flow_ops']}", flush=True)
    for source_name, description in QUANTIZED:
        if args.only and not any(w in source_name or w in ("int8", "quantized") for w in args.only):
            continue
        if source_name not in entries:
            print(f"skipping the int8 variant of {source_name}: export it first", file=sys.stderr)
            continue
        print(f"quantizing {source_name} ...", flush=True)
        try:
            entry = quantize_one(entries[source_name], description)
        except Exception as exc:
            failures.append(f"int8 of {source_name}: {type(exc).__name__}: {str(exc)[:300]}")
            print(f"  FAILED {failures[-1]}", flush=True)
            continue
        entries[entry["name"]] = entry
        print(f"  {entry['onnx_bytes']} bytes, {entry['gather_scatter_ops']}", flush=True)
    _save_manifest(entries)
    for failure in failures:
        print("failed:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
