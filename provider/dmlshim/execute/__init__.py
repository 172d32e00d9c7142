"""Execution: whole ONNX models run with their gather/scatter nodes executed through DirectML descriptors.

Where things live (each subpackage imports only those listed after it, and nothing above ``execute``
except the real onnxruntime in :mod:`dmlshim.runtime`):

- ``engines/``: the engines a session can run on (partitioned, custom-op, cpu) and the two paths of the
  partitioned engine (the whole-model check and the partitioned steps). The directml engine lives in
  :mod:`dmlshim.directml` with the stack it runs on.
- ``lowering/``: a model rewritten with custom-op nodes (the custom-op engine, ``dmlshim lower``).
- ``custom_ops/``: the custom ops' types and the Python kernel behind them.
- ``plan/``: what the partitioned engine cuts a model into, the steps a run walks, and the onnxruntime
  sessions they use.
- ``weights/``: where a session's model and weights come from (files, bytes, added initializers).
- ``proofs/``: when onnxruntime's output of a gather or scatter may stand for the kernel's.
- ``engine.py`` (the interface and the registry), ``record.py`` (what a run did), ``feeds.py`` (inputs
  and outputs as onnxruntime describes them).
"""
