"""A model rewritten for the custom-op engine: each translated gather/scatter node as a custom-domain node,
and the lowered file ``dmlshim lower`` writes. Imports ``custom_ops``, ``plan`` and below."""
