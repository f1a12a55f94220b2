"""The daemon's decisions as plain logic: the scheduler, eviction policies, TTL, proxy liveness."""
