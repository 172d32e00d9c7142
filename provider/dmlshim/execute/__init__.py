"""Execution: whole ONNX models with gather/scatter nodes executed through their DirectML descriptors."""
