"""dmlshim benchmarks: ``python bench/run.py [--quick] [--json]`` (see bench/README.md)."""
