"""The ``dmlshim`` command line."""
