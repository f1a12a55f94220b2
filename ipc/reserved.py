"""Model ids with a meaning of their own, known to both the daemon and the proxy."""

from __future__ import annotations

# The reserved ComfyUI model behind `/comfyui/` (shared/seed/comfyui-endpoint.txt).
COMFYUI_MODEL_ID = "comfyui_auto"
