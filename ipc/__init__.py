"""The daemon <-> proxy contract: typed messages, one codec, socket paths."""
