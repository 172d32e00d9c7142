"""dmlshim's version, as the records and reports state it (equal to the version in pyproject.toml)."""

__version__ = "0.1.0"
