"""How `check-config --print` shows the values read by hand: the `render` of their `Key`s in
`shape.py` (a plain key is shown as its resolved value). Pure functions of resolved values (the
ipc structs, or any struct with the fields named), so they stand on the floor."""

from __future__ import annotations

from typing import Any

import msgspec

from ....ipc.routing_table import Filters, HttpCall, SleepMethod, SleepSetting

HIDDEN = "(hidden)"


def number(value: float) -> float | int:
    """30 rather than 30.0: the file said 30."""
    return int(value) if float(value).is_integer() else value


def filters(value: Filters) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "stripParams": ",".join(value.strip_params),
        "setParams": dict(value.set_params),
    }
    if value.set_params_by_id:
        shown["setParamsByID"] = {k: dict(v) for k, v in value.set_params_by_id.items()}
    return shown


def sleep(setting: SleepSetting) -> dict[str, Any]:
    # A preset (or llmsnap's keys) spelled out: every call with its timeout.
    def calls(items: tuple[HttpCall, ...]) -> list[dict[str, Any]]:
        return [
            {"endpoint": c.endpoint, "method": c.method, "timeout": number(c.timeout)}
            | ({"body": c.body} if c.body else {})
            for c in items
        ]

    if setting.method is SleepMethod.CUDA:  # no calls: the driver's checkpoint is its sleep
        return {
            "preset": setting.preset,
            "lockTimeout": number(setting.lock_timeout),
            "stopAfter": number(setting.stop_after),
        }
    return {
        **({"preset": setting.preset} if setting.preset else {}),
        "sleepEndpoints": calls(setting.sleep),
        "wakeEndpoints": calls(setting.wake),
        "stopAfter": number(setting.stop_after),
        "servesAsleep": setting.serves_asleep,
        **(
            {"wakeOn": [f"{rule.method} {rule.path}" for rule in setting.wake_on]}
            if setting.wake_on is not None
            else {}
        ),
    }


def busy_check(check: Any) -> dict[str, Any]:
    """A `BusyCheck` (busy_check_fields.py): a preset spelled out, what `busyCheck: comfyui`
    stands for."""
    counts = [
        {k: v for k, v in msgspec.structs.asdict(count).items() if v is not None}
        for count in check.counts
    ]
    return {
        "preset": check.preset,
        "path": check.path,
        "count": counts,
        "interval": number(check.interval),
        "timeout": number(check.timeout),
        "swapWait": number(check.swap_wait),
    }


# A model's keys read by hand (`shape.Model`), from its resolved `ModelConfig`.


def cmd(model: Any) -> dict[str, Any]:
    return {"cmd": list(model.cmd)}


def cmd_stop(model: Any) -> dict[str, Any]:
    return {"cmdStop": list(model.cmd_stop) if model.cmd_stop is not None else None}


def proxy(model: Any) -> dict[str, Any]:
    # The allocated ${PORT} exists only resolved: shown beside the proxy URL it went into.
    return {"proxy": model.proxy, "port": model.port}


def check_endpoint(model: Any) -> dict[str, Any]:
    return {"checkEndpoint": model.check_endpoint if model.check_endpoint is not None else "none"}


def unload_timeout(model: Any) -> dict[str, Any]:
    # healthCheckTimeout is the top level's alone; shown with the model's other timeout.
    return {
        "unloadTimeout": number(model.unload_timeout),
        "healthCheckTimeout": number(model.health_check_timeout),
    }


def compat(model: Any) -> dict[str, Any]:
    return {"compat": {"ignoreWebsockets": model.ignore_websockets}}


def gpus(model: Any) -> dict[str, Any]:
    if model.gpus_allowed is not None:
        return {"gpus": {"auto": list(model.gpus_allowed)}}  # by memory, on these GPUs only
    listed = list(model.gpus) if model.gpus is not None else None
    return {"gpus": "auto" if model.gpus_auto else listed}


def aliases(model: Any) -> dict[str, Any]:
    return {"aliases": list(model.aliases)}


def env(model: Any) -> dict[str, Any]:
    return {"env": [f"{name}={value}" for name, value in model.env.items()]}


def model_filters(model: Any) -> dict[str, Any]:
    return {"filters": filters(model.filters)}


def vram(model: Any) -> dict[str, Any]:
    return {} if model.vram is None else {"vram": list(model.vram)}  # bytes on each GPU


def model_busy_check(model: Any) -> dict[str, Any]:
    return {} if model.busy_check is None else {"busyCheck": busy_check(model.busy_check)}


def model_sleep(model: Any) -> dict[str, Any]:
    return {} if model.sleep is None else {"sleep": sleep(model.sleep)}


def wake_probe(model: Any) -> dict[str, Any]:
    probe = model.wake_probe
    if probe is None:
        return {"wakeProbe": "off"} if model.sleep is not None else {}
    if probe.default:
        return {}  # the default, which `sleep` implies
    body: dict[str, Any] = {"method": probe.method, "path": probe.path}
    if probe.body:
        body["body"] = probe.body
    if probe.json_path:
        body["jsonPath"] = ".".join(probe.json_path)
    for name in ("expect", "match"):
        if getattr(probe, name) is not None:
            body[name] = getattr(probe, name)
    body["timeout"] = number(probe.timeout)
    return {"wakeProbe": body}


def model_kv_cache(model: Any) -> dict[str, Any]:
    setting = model.kv_cache
    if setting is None:
        return {}
    if setting.preset is not None:
        return {"kvCache": setting.preset}
    calls = {
        name: f"{call.method} {call.endpoint}"
        for name, call in (
            ("list", setting.list),
            ("save", setting.save),
            ("restore", setting.restore),
        )
    }
    return {"kvCache": {**calls, "timeout": setting.save.timeout}}


# The top level's keys read by hand (`shape.Top`), from the resolved `Config`.

# Where the models go: `render.py` writes them itself, one id line each.
MODELS = object()


def models(config: Any) -> dict[str, Any]:
    return {"models": MODELS}


def api_keys(config: Any) -> dict[str, Any]:
    return {"apiKeys": [HIDDEN for _ in config.api_keys]}


def kv_cache(config: Any) -> dict[str, Any]:
    """`kvCacheDir` and `kvCacheBudget`, once a model has a `kvCache` setting."""
    if not any(m.kv_cache is not None for m in config.models.values()):
        return {}
    return {"kvCacheDir": config.kv_cache_dir, "kvCacheBudget": config.kv_cache_budget}


def store(config: Any) -> dict[str, Any]:
    return {"store": {"path": config.store_path}} if config.store_path else {}


def ui(config: Any) -> dict[str, Any]:
    return {"ui": {"activity": {"session_id": list(config.session_headers)}}}


def performance(config: Any) -> dict[str, Any]:
    every = f"{config.performance_every:g}s"
    return {"performance": {"disabled": config.performance_disabled, "every": every}}


def learn(config: Any) -> dict[str, Any]:
    return {"learn": {"enabled": config.learn, "prefetch": config.learn_prefetch}}


def security(config: Any) -> dict[str, Any]:
    cors = config.cors
    return {
        "security": {
            "cors": {
                "allowedOrigins": list(cors.allowed_origins),
                "allowCredentials": cors.allow_credentials,
                "allowedMethods": list(cors.allowed_methods),
                "allowedHeaders": list(cors.allowed_headers),
                "exposedHeaders": list(cors.exposed_headers),
                "maxAge": cors.max_age,
            }
        }
    }


def groups(config: Any) -> dict[str, Any]:
    # `routing.router.settings.groups` too: shown in the legacy form.
    if not config.groups:
        return {}
    return {
        "groups": {
            name: {
                "swap": group.swap,
                "exclusive": group.exclusive,
                "persistent": group.persistent,
                "members": list(group.members),
            }
            for name, group in config.groups.items()
        }
    }


def matrix(config: Any) -> dict[str, Any]:
    # `routing.router.settings.matrix` too: shown in the legacy form.
    if config.matrix is None:
        return {}
    return {
        "matrix": {
            "vars": dict(config.matrix.vars),
            "evict_costs": dict(config.matrix.evict_costs),
            "sets": {s.name: s.dsl for s in config.matrix.sets},
        }
    }


def routing(config: Any) -> dict[str, Any]:
    if not config.priority:
        return {}
    return {"routing": {"scheduler": {"settings": {"fifo": {"priority": dict(config.priority)}}}}}


def peers(config: Any) -> dict[str, Any]:
    if not config.peers:
        return {}
    return {
        "peers": {
            name: {
                "proxy": peer.proxy,
                "apiKey": HIDDEN if peer.api_key else None,
                "models": list(peer.models),
                "filters": filters(peer.filters),
            }
            for name, peer in config.peers.items()
        }
    }


def upstream(config: Any) -> dict[str, Any]:
    return {"upstream": {"ignorePaths": list(config.ignore_paths)}}


def hooks(config: Any) -> dict[str, Any]:
    return {"hooks": {"on_startup": {"preload": list(config.preload)}}}
