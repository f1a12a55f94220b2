"""What the benchmarks share: a real `swapd run` (`swapd.py`), the side-by-side proxy set-up with
wrk and nginx (`side_by_side.py`, `relay.py`), paired rounds (`paired.py`), the report and its
results file (`report.py`), and the helper programs the benchmarks start by path
(`pipeline_floor.py`, `pipeline_stages.py`, `load_clients.py`, `gpu_holder.py`)."""
