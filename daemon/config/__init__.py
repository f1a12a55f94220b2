"""The config seam: llama-swap's YAML read into typed, immutable values.

Everything outside this package imports from here, not from the modules inside it.
"""

from __future__ import annotations

from .issues import ConfigError, ConfigIssue
from .loader import load, load_config, load_config_text
from .model import (
    Config,
    Filters,
    Forced,
    GroupConfig,
    MatrixConfig,
    ModelConfig,
    PeerConfig,
)
from .sources import ConfigSources

__all__ = [
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ConfigSources",
    "Filters",
    "Forced",
    "GroupConfig",
    "MatrixConfig",
    "ModelConfig",
    "PeerConfig",
    "load",
    "load_config",
    "load_config_text",
]
