"""The `swapd` command line, apart from the daemon process: `command` (the subcommands), `run`
(`swapd run`: the config checked, the run directory, then circusd exec'd), `circus_config` (the
circus INI), `circusd` (circus's circusd with swapd's one patch), `operator` (`status`, `unload`,
`reload` and friends over the daemon's socket), `demo_server` (the embedded config's demo models).
"""
