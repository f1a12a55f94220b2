"""The config's sections, each read from its typed form in `shape.py` with llama-swap's quirks:
the top level, models, sleep, busy checks, GPUs, routing (groups, matrix, selectors, profiles),
security and observe (the web UI's session headers, the sampler)."""
