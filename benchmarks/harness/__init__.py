"""What the benchmarks share: a real `swapd run` (`swapd_run.py`), the side-by-side proxy set-up
with wrk and nginx (`side_by_side.py`, `contenders.py`, `streams.py`), paired rounds
(`paired.py`), the report and its results file (`report.py`), and the helper programs the
benchmarks start by path (`pipeline_floor.py`, `pipeline_stages.py`, `load_clients.py`,
`gpu_holder.py`; run so, this folder is first on their `sys.path`, so no module here may be
named like a package they import: tests/unit/test_bench_harness.py checks)."""
