"""Inputs for a model: generated ones that onnxruntime accepts, and ``.npz`` files read safely.

* :mod:`.symbols`: the dimensions of the graph inputs (static, symbolic, derived) and sizes given by name;
* :mod:`.constraints`: which inputs reach gather/scatter indices and the range they must stay in;
* :mod:`.values`: the values drawn for each input;
* :mod:`.narrow_floats`: bfloat16 and float8 inputs, which numpy cannot hold (generated as OrtValues, read
  from files as raw bits or float32 values);
* :mod:`.search`: symbol sizes that onnxruntime CPU accepts, and the public :func:`generate`;
* :func:`load_npz` and :func:`save_npz` (from :mod:`dmlshim.fileio.npz`): reading ``--inputs`` files (sizes
  checked against the memory limit before inflating, no pickles, a clear message for files of another type).
"""

from __future__ import annotations

from ..fileio.npz import load_npz, save_npz
from .constraints import DEFAULT_DIM, IndexConstraint, InputSpec, plan_inputs
from .search import FIX_HINT, GeneratedInputs, annotate_error, generate, generate_inputs
from .symbols import resolve_input_shapes

__all__ = [
    "DEFAULT_DIM",
    "FIX_HINT",
    "GeneratedInputs",
    "IndexConstraint",
    "InputSpec",
    "annotate_error",
    "generate",
    "generate_inputs",
    "load_npz",
    "plan_inputs",
    "resolve_input_shapes",
    "save_npz",
]
