"""swapd proxy: the aiohttp front on the listen port (`python -m swapd.proxy`).

Module map (docs/architecture.md, "The proxy's request pipeline"):
* `__main__`: process entry (circus fd or `--listen`), event loop, signals.
* `server`: aiohttp's server as a proxy facing any client needs it (limits, head timeout, quiet
  bad requests) and the shutdown grace.
* `app`: app factory, route table, the `front` middleware (shutdown 503, CORS preflight,
  credentials, API keys, errors).
* `pipeline`: the forwarding routes, stage by stage: route decision -> admission -> forward ->
  relay -> accounting.
* `decide`: the route decision, a pure function; `matching`: linear-time path patterns;
  `comfyui`, `model_routes`: the rules and routes they decide over.
* `body`: the request's model (JSON, multipart, form, query), bounded reads, filters.
* `forward`: what goes upstream (headers, Host, X-Forwarded-*, body); `upstream`: the one
  upstream interface and its transports (`upstream_client`: the lean pool, `upstream_conn`: one
  of its connections; aiohttp's client);
  `relay`: the response relay; `websocket`: the websocket relay.
* `admission`: concurrency limit (429), in-flight counts, drains, rate-limited activity.
* `state`, `address`: the mirror of the daemon's routing table and model states;
  `state_sync`: keeps it in step (SUB + Snapshot, Hello); `daemon_link`: requests and casts.
* `stats`, `access_log`: the counters and the access line.
* `models_list`, `ops`, `logs`, `log_hub`, `auth`, `errors`, `sync_wait`, `context`: one route
  family or concern each.
"""
