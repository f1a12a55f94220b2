"""The request traces of `python -m benchmarks trace_replay` and the script that writes them."""
