"""The ONNX model as onnxruntime sees it, before any engine runs it.

The model check (:mod:`.modelcheck`, naming the culprit when onnxruntime refuses a model:
:mod:`.ort_errors`), preparation as onnxruntime prepares a model (:mod:`.prepare`, :mod:`.inline`), graph
traversal and node naming (:mod:`.graph`), weightless copies (:mod:`.weightless`) and onnxruntime's own
view of the values' types and shapes (:mod:`.ort_view`).
"""
