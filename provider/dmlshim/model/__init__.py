"""The ONNX model as onnxruntime sees it, before any engine runs it.

The model check (:mod:`.modelcheck`; onnxruntime's verdict on whether it loads: :mod:`.ort_acceptance`;
naming the culprit when onnxruntime refuses a model: :mod:`.ort_errors`), preparation as onnxruntime
prepares a model (:mod:`.prepare`, :mod:`.inline`), graph traversal and node naming (:mod:`.graph`),
weightless copies (:mod:`.weightless`), onnxruntime's own view of the values' types and shapes
(:mod:`.ort_view`), and ScatterND with empty index tuples kept from onnxruntimes that crash on it
(:mod:`.zero_depth_scatternd`, :mod:`.zero_depth_operators`).
"""
