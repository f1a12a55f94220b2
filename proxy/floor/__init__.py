"""The proxy's floor: what every folder of the proxy may stand on, and which stands on nothing of
the proxy itself (only on `ipc/`): `errors` (the one error tree and error shape), `account` (what
the accounting stage learns about a request, and the capture tee), `matching` (linear-time path
patterns, compiled once per routing table by the mirror and once for ComfyUI's by routing).

`tests/unit/test_proxy_layout.py` holds it to that: a module here imports only `ipc/` and the
floor.
"""
