"""swapd proxy: the aiohttp front on the listen port (`python -m swapd.proxy`).

Module map, by folder (docs/architecture.md, "Inside the proxy", says what each folder may
import; tests/unit/test_proxy_layout.py holds the code to both):

The top: ingress and the pipeline, in a request's order.
* `__main__`: process entry (circus fd or `--listen`), event loop, signals.
* `server`: aiohttp's server as a proxy facing any client needs it (limits) and the shutdown
  grace; `connection`: one client connection (the head's time bound, quiet bad requests).
* `dispatch`: the first file of a request's way: which way it comes in (model routes straight to
  the pipeline), the stages it goes through, and `Stages` (a benchmark's stand-ins for some).
* `front`: the front checks (`guard`: shutdown 503, CORS preflight, credentials, other sites,
  API keys, errors); `auth`: API keys; `origin_check`: cross-site refusals.
* `app`: app factory (the context made and wired at start-up), route table.
* `pipeline`: the forwarding routes, stage by stage: route decision -> admission -> forward ->
  relay -> accounting; `admission`: a request's place with its model (`Slot`, one `async
  with`: concurrency limit 429, in-flight counts), drains, rate-limited activity;
  `drain_bound`: how long a drain waits for requests their clients hold up; `loading`: loading
  progress streamed while a model starts; `forwarding`: what the decision serves, as one
  record, sent to a local model's upstream or a peer.
* `context`: everything one proxy holds, made at start-up.

`floor/`: what every folder may stand on (it imports only `ipc/`).
* `errors`: the one error tree and error shape; `account`: what the accounting stage learns
  about a request (and the capture tee); `matching`: linear-time path patterns; `progress`: how
  a dialect's streams carry loading progress (`ProgressFrames`, which `loading` writes).

`routing/`: the route decision, pure functions.
* `decide`: the decision; `body`: the request's model (JSON, multipart, form, query), bounded
  reads, filters; `rewrite`: the body and query a decision asks for; `model_routes`: the routes
  dispatched by `model`; `comfyui`: the `/comfyui/` rules; `wake_rules`: which requests wake an
  asleep server that keeps serving (`wakeOn`); `selectors`: selector strategies.

`upstream/`: forwarding.
* `forward`: what goes upstream (headers, Host, X-Forwarded-*, body); `transport`: the one
  upstream interface and its two transports (the lean pool, aiohttp's client); `pool`: the
  lean keep-alive pool; `conn`: one of its connections and its parsing; `response`: one of its
  responses; `timeouts`: the model's `timeouts` on the pool; `address`: an upstream's parsed
  address; `relay`: the response relay (and the replies streaming now); `websocket`: the
  websocket relay.

`mirror/`: the copy of the daemon's state.
* `state`: the routing table and every model's state; `changes`: its one state-change channel;
  `sync`: keeps it in step (SUB + Snapshot, Hello); `link`: requests and casts to the daemon;
  `wait`: waiting for the first table.

`observe/`: observability.
* `activity`: the activity records and in-flight reports sent to the daemon; `flights`: a
  request's in-flight entry; `captures`: a request's capture; `access_log`: the access line and
  the accounting stage's logger; `stats`: the counters; `events`: the `/api/events` hub;
  `llama_view`: model states as llama-swap's clients read them; `capabilities`: a model's
  capabilities as `/v1/models` and `modelStatus` show them; `log_hub`: the proxy's own log ring;
  `log_files`: the models' log files; `combined_log`: the one follower of the models' logs and
  the `/logs` stream of both; `backlog`: a streaming client's unsent data, bounded in bytes.

`api/`: route handlers of swapd's own endpoints.
* `models`: `/v1/models`; `ops`: `/health`, `/running`, unloading; `events`: `/api/events`;
  `observe`: activity, metrics, captures, in-flight; `logs`: `/logs`; `profiles`:
  `/api/profiles`; `ui_routes`: the web UI.

`dialects/`: other APIs, through the one pipeline (a reader's `pipeline.Way`).
* `paths`: the dialects' paths the front checks know; `llamacpp_router`: llama.cpp's router
  API; `ollama/`: Ollama's API (`routes`: its routes, and `/api/version`; `requests`: its
  requests as the model's own; `relaying`, `streams`, `replies`: the model's answers as
  Ollama's; `listing`: `/api/tags`, `/api/ps`, `/api/show`; `values`: names, durations,
  `keep_alive`; `progress`: loading progress as `thinking` lines).

`ui/`: the web UI's static files; `assets`: read once and kept in memory.
"""
