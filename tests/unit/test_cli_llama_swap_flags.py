"""llama-swap's command line taken by `swapd` (issue 25): its single-dash flags (Go's flag package
takes `-name value`, `-name=value` and two dashes alike) as aliases of `swapd run`'s options, and
without a sub-command its flags mean `run`; `swapd run` refuses half a TLS pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from swapd.daemon.cli.command import build_parser, llama_swap_argv
from tests.support.cli import swapd


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            ["-config", "c.yaml", "-listen", ":8080"],
            ["run", "--config", "c.yaml", "--listen", ":8080"],
        ),
        (["--config=c.yaml", "-watch-config"], ["run", "--config=c.yaml", "--watch-config"]),
        (["-config-dir", "d", "-watch-config=false"], ["run", "--config-dir", "d"]),
        (
            ["-config", "c.yaml", "-tls-cert-file", "a.pem", "-tls-key-file", "k.pem"],
            ["run", "--config", "c.yaml", "--tls-cert-file", "a.pem", "--tls-key-file", "k.pem"],
        ),
        (["run", "-config", "c.yaml"], ["run", "--config", "c.yaml"]),
        (["run", "-c", "c.yaml", "--listen", ":9"], ["run", "-c", "c.yaml", "--listen", ":9"]),
        (["-version"], ["--version"]),
        (["check-config", "-config", "c.yaml"], ["check-config", "--config", "c.yaml"]),
        (["status", "--json"], ["status", "--json"]),
    ],
)  # fmt: skip
def test_llama_swap_flags_become_swapds(given: list[str], expected: list[str]) -> None:
    assert llama_swap_argv(given) == expected


def test_the_llama_swap_form_parses_as_run() -> None:
    args = build_parser().parse_args(llama_swap_argv(["-config", "c.yaml", "-listen", ":8080"]))
    assert (args.command, args.config, args.listen) == ("run", Path("c.yaml"), ":8080")


def test_version_as_llama_swap_prints_it() -> None:
    result = swapd("-version")
    assert result.returncode == 0 and result.stdout.startswith("version: ")


def test_half_a_tls_pair_or_an_unusable_one_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("models: {}\n")
    result = swapd("-config", str(config), "-tls-cert-file", str(tmp_path / "cert.pem"))
    assert result.returncode == 2
    assert "both --tls-cert-file and --tls-key-file must be provided for TLS" in result.stderr
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    result = swapd(
        "run", "-c", str(config), "--tls-cert-file", str(tmp_path / "cert.pem"),
        "--tls-key-file", str(tmp_path / "key.pem"),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(f"swapd: cannot use --tls-cert-file {tmp_path / 'cert.pem'}")
