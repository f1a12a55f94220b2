"""swapd proxy: the aiohttp front on the listen port (`python -m swapd.proxy`).

Module map:
* `__main__`: process entry (circus fd or `--listen`), event loop, runner.
* `app`: app factory, route table, the one middleware (CORS preflight, API keys, errors).
* `context`: the per-process objects handlers share (`request.app[CTX]`).
* `state`: the mirror of the daemon's routing table and model states (SUB + Snapshot, Hello).
* `daemon_link`: requests and casts to the daemon (ensure, unload, activity, drained).
* `admission`: concurrency limit (429), in-flight counts, drains, rate-limited activity.
* `dispatch`: serve a request with a local model (hot path without IPC, else `Ensure`).
* `body`: the request's model (JSON, multipart, form, query), the body limit, filters.
* `forward`, `upstream_client`: streaming HTTP forwarding (lean client for local models).
* `websocket`: websocket relay.
* `passthrough`: `/upstream/<model>/...` and the reusable `passthrough()` (`comfyui` uses it).
* `model_routes`, `models_list`, `peers`, `ops`, `logs`, `log_hub`, `auth`, `errors`,
  `sync_wait`: one route family or concern each.
"""
