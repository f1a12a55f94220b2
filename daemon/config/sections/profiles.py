"""`profiles`: llama-swap's named sets of pins, checked with its rules and messages
(`validateProfiles` in its internal/config/load.go).

A pin maps a name a client asks for to a target: a local model id or alias, a peer model
(`peer/model`, or a bare name one peer offers), or a selector. An empty or null target disables
the name while the profile is active.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .. import shape
from ..floor.issues import Report
from ..model import PeerConfig, Profile


def read(
    specs: Mapping[str, shape.Profile] | None,
    names: Collection[str],
    peers: Mapping[str, PeerConfig],
    report: Report,
) -> dict[str, Profile]:
    """`names`: every local model id and alias, and every selector id."""
    offered = {f"{peer_id}/{m}" for peer_id, peer in peers.items() for m in peer.models}
    offered |= {m for peer in peers.values() for m in peer.models}
    result: dict[str, Profile] = {}
    for name, spec in (specs or {}).items():
        path = ("profiles", name)
        if not name.strip():
            report.error(path, "profiles: profile names cannot be empty", key=True)
            continue
        pins: dict[str, str] = {}
        if not spec.pins:
            report.error(path, f"profiles.{name}.pins must contain at least one entry", key=True)
        for pin, target in (spec.pins or {}).items():
            if not pin.strip():
                report.error(
                    (*path, "pins", pin), f"profiles.{name}.pins: pin names cannot be empty"
                )
                continue
            target = (target or "").strip()
            if target and target not in names and target not in offered:
                report.error(
                    (*path, "pins", pin),
                    f'profiles.{name}.pins.{pin} references unknown model "{target}"',
                )
                continue
            pins[pin] = target
        result[name] = Profile(id=name, description=spec.description or "", pins=pins)
    return result
