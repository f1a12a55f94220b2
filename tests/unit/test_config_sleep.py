"""The `sleep` setting and llmsnap's keys: presets, the written-out form, the timeouts and where
they come from, and the errors and warnings each names with file, line and key path."""

from __future__ import annotations

import textwrap
from typing import get_args

import pytest
import yaml

from swapd.daemon.config.loader import ConfigError, Loaded, load_text
from swapd.daemon.config.render import render
from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.config.shape import SleepPreset
from swapd.daemon.routing import routing_table
from swapd.ipc.routing_table import HttpCall, WakeRule


def _load(text: str) -> Loaded:
    return load_text(textwrap.dedent(text).lstrip("\n"), "sleep.yaml", environ={})


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    return [str(issue) for issue in caught.value.issues]


def test_without_the_setting_nothing_changes() -> None:
    loaded = _load("models:\n  a:\n    cmd: srv --port ${PORT}\n")
    assert loaded.config.models["a"].sleep is None
    assert loaded.warnings == ()


def test_each_preset_is_its_servers_documented_calls() -> None:
    loaded = _load(
        """
        models:
          v:
            cmd: vllm serve m --port ${PORT} --enable-sleep-mode
            env: [VLLM_SERVER_DEV_MODE=1]
            sleep: vllm
          v2:
            cmd: vllm serve m --port ${PORT} --enable-sleep-mode
            env: [VLLM_SERVER_DEV_MODE=1]
            sleep: vllm-level2
          s:
            cmd: python -m sglang.launch_server --port ${PORT} --enable-memory-saver
            sleep: sglang
          c:
            cmd: comfy --port ${PORT}
            checkEndpoint: /
            sleep: comfyui
        """
    )
    assert loaded.warnings == ()
    models = loaded.config.models
    v = models["v"].sleep
    assert v is not None and v.preset == "vllm"
    assert [(c.method, c.endpoint) for c in v.sleep] == [("POST", "/sleep?level=1")]
    assert [(c.method, c.endpoint) for c in v.wake] == [("POST", "/wake_up")]
    v2 = models["v2"].sleep
    assert v2 is not None
    assert [c.endpoint for c in v2.sleep] == ["/sleep?level=2"]
    assert [(c.endpoint, c.body) for c in v2.wake] == [
        ("/wake_up?tags=weights", ""),
        ("/collective_rpc", '{"method": "reload_weights"}'),
        ("/wake_up?tags=kv_cache", ""),
        ("/reset_prefix_cache", ""),
    ]
    s = models["s"].sleep
    assert s is not None
    assert [c.endpoint for c in s.sleep] == ["/release_memory_occupation"]
    assert [c.endpoint for c in s.wake] == ["/resume_memory_occupation"]
    c = models["c"].sleep
    assert c is not None and c.serves_asleep and c.wake == ()
    assert c.sleep == (
        HttpCall("/free", body='{"unload_models": true, "free_memory": true}', timeout=30.0),
    )
    # Only ComfyUI's server keeps answering while asleep; the proxy learns it from the table.
    table = {m.id: m for m in routing_table(loaded.config, 1).models}
    assert table["c"].sleep is not None and table["c"].sleep.serves_asleep
    assert table["v"].sleep is not None and not table["v"].sleep.serves_asleep


def test_a_preset_with_settings_changed_and_the_written_out_form() -> None:
    loaded = _load(
        """
        models:
          p:
            cmd: comfy --port ${PORT}
            sleep: {preset: comfyui, stopAfter: 3600, sleepRequestTimeout: 90}
          w:
            cmd: srv --port ${PORT}
            sleep:
              sleepEndpoints:
                - POST /sleep
                - {endpoint: /drop, method: put, body: {all: true}, timeout: 7}
              wakeEndpoints: [{endpoint: /wake, method: GET}]
              wakeRequestTimeout: 30
              servesAsleep: true
        """
    )
    p = loaded.config.models["p"].sleep
    assert p is not None and p.stop_after == 3600.0 and p.sleep[0].timeout == 90.0
    assert p.preset == "comfyui" and p.serves_asleep
    w = loaded.config.models["w"].sleep
    assert w is not None and w.preset == "" and w.serves_asleep
    assert w.sleep == (
        HttpCall("/sleep", timeout=10.0),
        HttpCall("/drop", method="PUT", body='{"all": true}', timeout=7.0),
    )
    assert w.wake == (HttpCall("/wake", method="GET", timeout=30.0),)


def test_llmsnap_keys_with_llmsnaps_meaning() -> None:
    loaded = _load(
        """
        sleepRequestTimeout: 20
        wakeRequestTimeout: 0.5
        models:
          a:
            cmd: srv --port ${PORT}
            sleepMode: enable
            sleepEndpoints:
              - endpoint: /sleep?level=1
                method: POST
            wakeEndpoints:
              - endpoint: /wake_up
              - endpoint: /collective_rpc
                body: '{"method": "reload_weights"}'
                timeout: 12
          off:
            cmd: srv --port ${PORT}
            sleepMode: disable
            sleepEndpoints: [{endpoint: /sleep}]
            wakeEndpoints: [{endpoint: /wake_up}]
        """
    )
    a = loaded.config.models["a"].sleep
    assert a is not None
    # A call without its own timeout takes the top level's; 0.5 is raised to llmsnap's least, 1.
    assert a.sleep == (HttpCall("/sleep?level=1", timeout=20.0),)
    assert a.wake == (
        HttpCall("/wake_up", timeout=1.0),
        HttpCall("/collective_rpc", body='{"method": "reload_weights"}', timeout=12.0),
    )
    assert loaded.config.models["off"].sleep is None
    warnings = [str(w) for w in loaded.warnings]
    assert any("wakeRequestTimeout: 0.5 is below 1" in w for w in warnings), warnings
    assert any(
        w.startswith("sleep.yaml:18 models.off.sleepEndpoints: sleepMode is not enable")
        for w in warnings
    ), warnings


def test_the_top_level_timeouts_apply_to_presets_too() -> None:
    loaded = _load(
        """
        sleepRequestTimeout: 45
        models:
          c:
            cmd: comfy --port ${PORT}
            sleep: comfyui
        """
    )
    c = loaded.config.models["c"].sleep
    assert c is not None and c.sleep[0].timeout == 45.0
    assert PRESETS["comfyui"].sleep[0].timeout == 30.0


def test_mistakes_name_file_line_and_key() -> None:
    errors = _errors(
        """
        models:
          a:
            cmd: srv --port ${PORT}
            sleep: vlm
          b:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, stopafter: 5}
          c:
            cmd: srv --port ${PORT}
            sleepMode: enable
            sleepEndpoints: [{endpoint: /sleep}]
          d:
            cmd: srv --port ${PORT}
            sleep: comfyui
            sleepMode: enable
          e:
            cmd: srv --port ${PORT}
            sleep:
              sleepEndpoints: [{endpoint: http://elsewhere/sleep}, {endpoint: /x, method: DELETE}]
          f:
            cmd: srv --port ${PORT}
            sleep: {wakeEndpoints: [POST /wake]}
          g:
            cmd: srv --port ${PORT}
            sleepMode: maybe
        """
    )
    assert errors == [
        "sleep.yaml:4 models.a.sleep: unknown preset 'vlm': expected vllm, vllm-level2, "
        "sglang, comfyui; did you mean 'vllm'?",
        "sleep.yaml:7 models.b.sleep.stopafter: unknown key 'stopafter'; did you mean 'stopAfter'?",
        "sleep.yaml:10 models.c.sleepMode: wakeEndpoints required when sleepMode is 'enable'",
        "sleep.yaml:15 models.d.sleepMode: use either sleep or llmsnap's sleepMode, "
        "sleepEndpoints, wakeEndpoints, not both",
        "sleep.yaml:19 models.e.sleep.sleepEndpoints[0].endpoint: expected a path on the model's "
        "own server (its proxy URL), got 'http://elsewhere/sleep'",
        "sleep.yaml:19 models.e.sleep.sleepEndpoints[1].method: invalid method 'DELETE' (must "
        "be GET, POST, PUT, PATCH)",
        "sleep.yaml:22 models.f.sleep: needs sleepEndpoints (the calls that put it to sleep) or "
        "a preset",
        "sleep.yaml:25 models.g.sleepMode: invalid sleepMode value 'maybe': must be enable or "
        "disable",
    ]


def test_a_preset_whose_server_needs_a_flag_warns_when_cmd_lacks_it() -> None:
    loaded = _load(
        """
        models:
          v:
            cmd: vllm serve m --port ${PORT}
            sleep: vllm
        """
    )
    assert [str(w) for w in loaded.warnings] == [
        "sleep.yaml:4 models.v.sleep: vLLM serves /sleep only when started with "
        "--enable-sleep-mode; neither cmd nor env has --enable-sleep-mode",
        "sleep.yaml:4 models.v.sleep: vLLM's /sleep and /wake_up need VLLM_SERVER_DEV_MODE=1; "
        "neither cmd nor env has VLLM_SERVER_DEV_MODE=1",
    ]


def test_print_spells_a_preset_out() -> None:
    loaded = _load("models:\n  c:\n    cmd: comfy --port ${PORT}\n    sleep: comfyui\n")
    printed = yaml.safe_load(render(loaded.config))
    assert printed["models"]["c"]["sleep"] == {
        "preset": "comfyui",
        "sleepEndpoints": [
            {
                "endpoint": "/free",
                "method": "POST",
                "timeout": 30,
                "body": '{"unload_models": true, "free_memory": true}',
            }
        ],
        "wakeEndpoints": [],
        "stopAfter": 0,
        "servesAsleep": True,
        "wakeOn": ["POST /prompt", "POST /api/prompt"],
    }


def test_wake_on_the_presets_and_the_written_form() -> None:
    loaded = _load(
        """
        models:
          c:
            cmd: comfy --port ${PORT}
            sleep: comfyui
          j:
            cmd: comfy --port ${PORT}
            sleep: {preset: comfyui, wakeOn: ['POST /api/prompt', '* /api/jobs/[0-9]+/run']}
          w:
            cmd: srv --port ${PORT}
            sleep: {sleepEndpoints: [POST /off], servesAsleep: true}
          off:
            cmd: comfy --port ${PORT}
            sleep: {preset: comfyui, servesAsleep: false}
          v:
            cmd: vllm serve m --port ${PORT} --enable-sleep-mode
            env: [VLLM_SERVER_DEV_MODE=1]
            sleep: vllm
        """
    )
    models = loaded.config.models
    c, j, w = models["c"].sleep, models["j"].sleep, models["w"].sleep
    assert c is not None and c.wake_on == (
        WakeRule("POST", "/prompt"),
        WakeRule("POST", "/api/prompt"),
    )
    assert j is not None and j.wake_on == (
        WakeRule("POST", "/api/prompt"),
        WakeRule("*", "/api/jobs/[0-9]+/run"),
    )
    assert w is not None and w.serves_asleep and w.wake_on is None  # any request but a read
    off, v = models["off"].sleep, models["v"].sleep
    assert off is not None and not off.serves_asleep and off.wake_on is None
    assert v is not None and v.wake_on is None
    printed = yaml.safe_load(render(loaded.config))["models"]
    assert printed["j"]["sleep"]["wakeOn"] == ["POST /api/prompt", "* /api/jobs/[0-9]+/run"]
    assert "wakeOn" not in printed["w"]["sleep"]


def test_wake_on_mistakes_name_file_line_and_key() -> None:
    errors = _errors(
        """
        models:
          a:
            cmd: srv --port ${PORT}
            sleep: {preset: vllm, wakeOn: [POST /wake]}
          b:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: POST /api/prompt}
          c:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: [/api/prompt]}
          d:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: [FETCH /api/prompt]}
          e:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: [POST api/prompt]}
          f:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: ['POST /api/(prompt']}
        """
    )
    assert errors == [
        "sleep.yaml:4 models.a.sleep.wakeOn: needs servesAsleep: true (a server that serves "
        "nothing while asleep wakes for every request)",
        "sleep.yaml:7 models.b.sleep.wakeOn: expected a list of 'METHOD /path' patterns, got "
        "'POST /api/prompt'",
        "sleep.yaml:10 models.c.sleep.wakeOn[0]: expected 'METHOD /path' (e.g. "
        "'POST /api/prompt'), got '/api/prompt'",
        "sleep.yaml:13 models.d.sleep.wakeOn[0]: invalid method 'FETCH' (must be *, GET, HEAD, "
        "POST, PUT, PATCH, DELETE, OPTIONS)",
        "sleep.yaml:16 models.e.sleep.wakeOn[0]: expected a path starting with '/', got "
        "'api/prompt'",
        "sleep.yaml:19 models.f.sleep.wakeOn[0]: invalid regular expression '/api/(prompt': "
        "missing ), unterminated subpattern at position 5",
    ]


def test_an_empty_or_costly_wake_on_warns() -> None:
    loaded = _load(
        """
        models:
          a:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: []}
          b:
            cmd: srv --port ${PORT}
            sleep: {preset: comfyui, wakeOn: ['POST /(a+)+']}
        """
    )
    assert loaded.config.models["a"].sleep.wake_on == ()  # type: ignore[union-attr]
    warnings = [str(w) for w in loaded.warnings]
    assert warnings[0] == (
        "sleep.yaml:4 models.a.sleep.wakeOn: lists nothing: no request wakes it (only a load or "
        "a wake by hand)"
    )
    assert warnings[1].startswith("sleep.yaml:7 models.b.sleep.wakeOn[0]: pattern '/(a+)+'")


def test_the_presets_are_the_declared_names() -> None:
    # `sleep`'s type in config/shape.py names them (its error lists them).
    assert tuple(PRESETS) == get_args(SleepPreset)
