"""The custom ops of the custom-op engine: their domain and types, the onnxruntime-extensions bridge and
the Python kernel behind every custom node. Imports ``plan`` and below."""
