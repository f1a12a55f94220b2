"""What swapd says when a model's process ends: the exit code or the signal in words
(`ipc/exits.py`), and the line of a failed start's output it quotes as the cause
(`machinery/model_log.py`'s `cause` and `start_failure`), on output recorded from real servers."""

from __future__ import annotations

import signal

import pytest

from swapd.daemon.machinery.model_log import cause, start_failure
from swapd.ipc import exits

# llama.cpp's llama-server (the xllamacpp wheel of the llama.cpp tier, run by
# tests/support/upstreams/llama_server.py) given a model file that does not exist: its output's
# last lines as swapd's log keeps them, the wrapper's own line last.
LLAMACPP_MISSING = (
    "0.00.000.317 I srv          init: initializing ...",
    "0.00.048.305 I srv          init: loading model",
    "0.00.048.394 I srv    load_model: loading model '/tmp/no-such-model.gguf'",
    "0.00.048.817 E gguf_init_from_file: failed to open GGUF file '/tmp/no-such-model.gguf' "
    "(No such file or directory)",
    "0.00.049.420 E llama_model_load: error loading model: llama_model_loader: failed to load "
    "model from /tmp/no-such-model.gguf",
    "0.00.049.443 E llama_model_load_from_file_impl: failed to load model",
    "0.00.049.490 E common_fit_params: encountered an error while trying to fit params to free "
    "device memory: failed to load model",
    "0.00.049.520 E gguf_init_from_file: failed to open GGUF file '/tmp/no-such-model.gguf' "
    "(No such file or directory)",
    "0.00.049.542 E llama_model_load: error loading model: llama_model_loader: failed to load "
    "model from /tmp/no-such-model.gguf",
    "0.00.049.554 E llama_model_load_from_file_impl: failed to load model",
    "0.00.049.575 E cmn  common_init_: failed to load model '/tmp/no-such-model.gguf'",
    "0.00.049.588 E srv    load_model: failed to load model, '/tmp/no-such-model.gguf'",
    "0.00.049.601 I srv    operator(): operator(): cleaning up before exit...",
    "0.00.049.957 E srv          init: exiting due to model loading error",
    "llama_server.py: cannot serve /tmp/no-such-model.gguf: Failed to init server, please check "
    "the input params.",
)
# llama-server's own binary ends at its `exiting due to` line (no wrapper).
LLAMA_SERVER_BINARY = LLAMACPP_MISSING[:-1]


def test_llamacpp_missing_file_names_the_file_and_why() -> None:
    expected = (
        "0.00.049.520 E gguf_init_from_file: failed to open GGUF file '/tmp/no-such-model.gguf' "
        "(No such file or directory)"
    )
    assert cause(LLAMACPP_MISSING) == expected
    assert cause(LLAMA_SERVER_BINARY) == expected


def test_without_what_the_system_said_a_named_line_wins_over_the_generic_ones() -> None:
    tail = tuple(line for line in LLAMA_SERVER_BINARY if "No such file" not in line)
    assert cause(tail).endswith("load_model: failed to load model, '/tmp/no-such-model.gguf'")


def test_a_python_traceback_quotes_its_exception() -> None:
    tail = (
        "INFO: loading weights",
        "Traceback (most recent call last):",
        '  File "/srv/app.py", line 12, in <module>',
        "    weights = open(path)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/models/w.bin'",
    )
    assert cause(tail) == tail[-1]


def test_an_earlier_warning_does_not_win_over_the_last_burst() -> None:
    tail = (
        "warning: config.json: No such file or directory, using defaults",
        "listening soon",
        "error: invalid argument: --frobnicate",
    )
    assert cause(tail) == "error: invalid argument: --frobnicate"


def test_with_no_error_word_the_last_line_or_nothing() -> None:
    tail = ("--- swapd 2026-01-01 00:00:00: starting m: x", "loading", "layer 3 of 80")
    assert cause(tail) == "layer 3 of 80"
    assert cause(tail, fallback=False) == ""
    assert cause(()) == ""


def test_exit_codes_and_signals_in_words() -> None:
    assert exits.said(1) == "exit code 1"
    assert exits.said(None) == "an unknown exit code"
    assert exits.said(-signal.SIGILL) == "killed by SIGILL (illegal instruction)"
    assert exits.said(-signal.SIGSEGV) == "killed by SIGSEGV (segmentation fault)"
    assert exits.said(-signal.SIGKILL) == (
        "killed by SIGKILL (killed; the kernel's out-of-memory killer sends it too)"
    )
    assert exits.said(128 + signal.SIGILL) == (
        "exit code 132 (a shell's or docker's way of saying: killed by SIGILL (illegal "
        "instruction))"
    )
    assert exits.said(-200) == "exit code -200"  # no such signal: the number as it came


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            1,
            "model m exited during startup with exit code 1: 0.00.049.520 E gguf_init_from_file: "
            "failed to open GGUF file '/tmp/no-such-model.gguf' (No such file or directory)",
        ),
        (
            -signal.SIGILL,
            "model m exited during startup, killed by SIGILL (illegal instruction)",
        ),
    ],
)
def test_a_start_failure_says_how_it_ended(code: int, expected: str) -> None:
    tail = LLAMACPP_MISSING if code == 1 else ("load_tensors: loading 80 layers", "layer 3 of 80")
    assert start_failure("m", code, tail) == expected


def test_a_death_by_signal_quotes_an_error_line_when_there_is_one() -> None:
    tail = ("layer 3 of 80", "GGML_ASSERT(ctx->mem_buffer != NULL) failed", "[New LWP 4242]")
    assert start_failure("m", -signal.SIGABRT, tail) == (
        "model m exited during startup, killed by SIGABRT (aborted): "
        "GGML_ASSERT(ctx->mem_buffer != NULL) failed"
    )
