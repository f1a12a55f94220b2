"""The eviction seam: `contract.py` (what a policy is given, what it answers, its contract),
`choose.py` (which policy a config gets), one module per policy (`one_at_a_time.py`,
`gpu_sets.py`, `groups.py`, `matrix.py`, `memory.py`), the rule they share for busy models
(`preemption.py`), and the solvers two of them use (`matrix_solver.py`, `memory_fit.py`)."""
