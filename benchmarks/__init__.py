"""swapd's benchmarks: speed and memory targets, measured side by side with a reference in the
same run. `python -m benchmarks --list` lists them, `python -m benchmarks NAME [--quick] [ARGS]`
runs one (benchmarks/README.md); the targets are benchmarks/targets.py's, the shared parts are
in benchmarks/harness/."""
