"""The config's shared machinery, which no section imports above: YAML nodes and their lines,
issues, macros, merging several files, the declaration vocabulary (`keys.py`), typing, the known-key
check and the preset step of `sleep` and `busyCheck`."""
