"""Benchmarks behind ``make bench``: each measures one piece against a named alternative in the same run
and reports the ratio. Run one with ``python -m rankrl.benchmarks.<name>``."""
