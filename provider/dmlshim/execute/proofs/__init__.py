"""Proofs that onnxruntime's output of a gather or scatter equals what DirectML gives, so a run may take
it instead of the kernel's. Imports nothing else in ``execute``."""
