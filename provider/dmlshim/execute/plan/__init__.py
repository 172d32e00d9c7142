"""The partitioned engine's plan: the graph cut into CPU segments and emulated nodes, the steps a run
walks, and the onnxruntime sessions and run errors they share. Imports ``weights``, ``proofs`` and the
root modules."""
