"""The `/comfyui/` endpoint's rules: a passthrough pinned to the local model `comfyui_auto`
(shared/seed/comfyui-endpoint.txt, docs/guides/comfyui.md). `decide.for_comfyui` applies them.

An open ComfyUI tab keeps a websocket open, polls `/api/jobs` and fetches assets for as long as it
exists. None of that may load the model or keep it loaded, or a forgotten tab would hold the GPU
forever and pull the model back in after every unload. So, on top of the passthrough rules:

* a `GET` to one of the fixed ignored paths answers 409 while the model is not ready, and while it
  is ready is served outside admission (the passthrough rule for ignored paths): it is not TTL
  activity, not in flight, and takes no slot;
* websocket upgrades follow `compat.ignoreWebsockets`, which the config loader forces on for
  `comfyui_auto` (409 while not ready, relayed outside admission when ready);
* everything else (the page, any `POST`, `/api/prompt`, ...) starts the model as any request does.
"""

from __future__ import annotations

import urllib.parse

from ..floor.matching import compile_path_pattern

PREFIX = "/comfyui"
IGNORED_PATH = "ignored ComfyUI paths cannot start it"
# Fixed, whatever `upstream.ignorePaths` says: the static-asset default, the frontend websocket
# (and anything under it), and the job list an open page polls. Matched on the decoded path after
# the prefix, without the query.
IGNORED_PATTERNS = tuple(
    compile_path_pattern(p)
    for p in (r".*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$", r"^/ws(/|$)", r"^/api/jobs$")
)


def is_ignored(method: str, raw_path: str) -> bool:
    """Only a GET is ignored: any other method is a deliberate action and may start the model."""
    if method != "GET":
        return False
    path = urllib.parse.unquote(raw_path)
    return any(pattern.search(path) for pattern in IGNORED_PATTERNS)
