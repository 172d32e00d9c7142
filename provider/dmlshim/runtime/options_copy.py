"""A copy of a program's ``SessionOptions``: what onnxruntime lets be read back of them (properties and
well-known config entries), taken when asked, so that sessions built from it later do not see what the
program changes in its own object meanwhile (onnxruntime reads the options once, when a session is built).
"""

from __future__ import annotations

import logging
from typing import Any

import onnxruntime as ort

logger = logging.getLogger(__name__)

FOLDER_KEY = "session.model_external_initializers_file_folder_path"
"""The onnxruntime session configuration entry naming the folder external data locations are relative to."""

COPIED_ATTRIBUTES = (
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "execution_mode",
    "execution_order",
    "graph_optimization_level",
    "inter_op_num_threads",
    "intra_op_num_threads",
    "log_severity_level",
    "log_verbosity_level",
    "logid",
    "use_deterministic_compute",
    "use_per_session_threads",
)
"""The ``SessionOptions`` properties carried to every onnxruntime session the engine builds (those the
installed onnxruntime has: ``use_per_session_threads`` arrived in onnxruntime 1.23)."""

COPIED_CONFIG_KEYS = (
    "session.disable_prepacking",
    "session.use_env_allocators",
    "session.set_denormal_as_zero",
    "session.disable_quant_qdq",
    "session.enable_quant_qdq_cleanup",
    "session.disable_double_qdq_remover",
    "session.disable_aot_function_inlining",
    "session.inter_op.allow_spinning",
    "session.intra_op.allow_spinning",
    "session.force_spinning_stop",
    "session.intra_op_thread_affinities",
    "session.dynamic_block_base",
    "session.qdqisint8allowed",
    "session.x64quantprecision",
    "session.strict_shape_type_inference",
    "session.allow_released_opsets_only",
    "session.disable_cpu_ep_fallback",
    "optimization.enable_gelu_approximation",
    "optimization.disable_specified_optimizers",
    "optimization.minimal_build_optimizations",
    "mlas.enable_gemm_fastmath_arm64_bfloat16",
    # the rest of what onnxruntime 1.32's CPU sessions read (the keys compiled into its library)
    "session.disable_qdq_constant_folding",
    "session.enable_dq_matmulnbits_fusion",
    "session.qdq_matmulnbits_accuracy_level",
    "session.qdq_matmulnbits_block_size",
    "session.inter_op.spin_backoff_max",
    "session.inter_op.spin_duration_us",
    "session.intra_op.spin_backoff_max",
    "session.intra_op.spin_duration_us",
    "session.function_expansion_byte_limit",
    "session.function_expansion_node_limit",
    "session.graph_optimizations_loop_level",
    "session.prepack.enable_parallel",
    "session.kernel_dispatch_policy",
    "session.gqa_value_layout",
    "session.max_shape_override",
    "session.strict_workspace_verification",
    "session.use_device_allocator_for_initializers",
    "session.external_data_loader.chunk_bytes",
    "session.external_data_loader.min_size_bytes",
    "session.external_data_loader.pinned_memory_bytes",
    "session.external_data_loader.threads",
    "session.use_external_initializer_file_buffers_directly",
    "session.intra_op_num_threads",
    "session.inter_op_num_threads",
    "session.graph_optimization_level",
    "session.execution_mode",
    "session.enable_cpu_mem_arena",
    "session.enable_mem_pattern",
    "session.use_deterministic_compute",
    "session.use_per_session_threads",
    "session.log_id",
    "session.log_severity_level",
    "session.log_verbosity_level",
    "optimization.constant_folding_max_output_size_in_bytes",
    "optimization.enable_cast_chain_elimination",
    "mlas.disable_kleidiai",
    "mlas.kleidiai.conv_igemm_max_work",
    "mlas.nchwc_depthwise_sliding",
    "mlas.nchwc_pointwise_conv_max_input_channel_batch",
    "mlas.qnbit.force_fp32",
    "mlas.use_lut_gemm",
    "ep.cpu.qmoe_deferred_scale",
)
"""Session config entries carried too. onnxruntime cannot list a ``SessionOptions``' entries, so only these
well-known keys are read back. Left out: model-format keys (the engine's partitions are ONNX bytes), the
keys that make onnxruntime write files or compile (profiling, optimized model, EP context, debug dumps:
dmlshim writes those for the whole model), other providers' keys, and the external-data folder, which
the engine sets itself when it does set it (:func:`engine_options`)."""


def config_entry(so: Any, key: str) -> str | None:
    """A session config entry of ``so``, or None when it is not set."""
    if so is None:
        return None
    try:
        return str(so.get_session_config_entry(key))
    except onnxruntime_errors() as exc:  # onnxruntime raises when the key is not set
        logger.debug("config entry %s not set: %s", key, exc)
        return None


def onnxruntime_errors() -> tuple[type[BaseException], ...]:
    from ..model.ort_errors import ORT_ERRORS

    return ORT_ERRORS


def copy_options(so: Any, *, profile_prefix: str | None = None) -> ort.SessionOptions:
    """A new ``SessionOptions`` with ``so``'s properties and well-known config entries, no
    ``optimized_model_filepath``, and profiling on (into ``profile_prefix``) only when asked."""
    out = ort.SessionOptions()
    if so is not None:
        for name in COPIED_ATTRIBUTES:
            # An older onnxruntime lacks some properties; one it lacks cannot have been set either.
            if hasattr(so, name) and hasattr(out, name):
                setattr(out, name, getattr(so, name))
        for key in COPIED_CONFIG_KEYS:
            value = config_entry(so, key)
            if value is not None:
                out.add_session_config_entry(key, value)
    out.optimized_model_filepath = ""
    out.enable_profiling = profile_prefix is not None
    if profile_prefix is not None:
        out.profile_file_prefix = profile_prefix
    return out
