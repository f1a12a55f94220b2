"""swapd supervisor daemon: config, lifecycles, GPUs, scheduling, and the `swapd` command."""
