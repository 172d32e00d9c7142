"""The real onnxruntime beneath every layer: the module captured once, and dmlshim's errors as its
exception classes. Knows nothing of dmlshim's sessions (``dmlshim.ort``)."""
