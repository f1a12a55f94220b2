"""The config seam: llama-swap's YAML read into typed, immutable values.

Everything outside this package imports from here, not from the modules inside it.
"""

from __future__ import annotations

from .check import main as check_config
from .embedded import default_config_path, describe_default
from .floor.issues import ConfigError, ConfigIssue
from .floor.matrix_dsl import Projection
from .floor.matrix_dsl import named as models_named
from .loader import load, load_config, load_config_text
from .model import (
    BusyCheck,
    BusyCount,
    Config,
    Filters,
    Forced,
    GroupConfig,
    KvCacheSetting,
    MatrixConfig,
    ModelConfig,
    PeerConfig,
    WakeProbe,
)
from .sources import ConfigSources

__all__ = [
    "BusyCheck",
    "BusyCount",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ConfigSources",
    "Filters",
    "Forced",
    "GroupConfig",
    "KvCacheSetting",
    "MatrixConfig",
    "ModelConfig",
    "PeerConfig",
    "Projection",
    "WakeProbe",
    "check_config",
    "default_config_path",
    "describe_default",
    "load",
    "load_config",
    "load_config_text",
    "models_named",
]
