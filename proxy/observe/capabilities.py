"""A model's `capabilities` as `/v1/models` shows them (llama-swap's `renderCapabilities`):
`architecture` (input/output modalities and `in1+in2->out`), `capabilities` flags,
`supported_parameters` for tools, `context_length` (and `meta.n_ctx`)."""

from __future__ import annotations

from typing import Any

from ...ipc.routing_table import Capabilities

# Fields the rendering owns: a model's metadata keys of these names are dropped when it renders.
OWNED = frozenset({"architecture", "capabilities", "supported_parameters", "context_length"})


def render(caps: Capabilities) -> dict[str, Any]:
    """The top-level fields of one `/v1/models` entry."""
    fields: dict[str, Any] = {}
    ins, outs = list(caps.inputs), list(caps.outputs)
    if ins or outs:
        arch: dict[str, Any] = {}
        if ins:
            arch["input_modalities"] = ins
        if outs:
            arch["output_modalities"] = outs
        if ins and outs:
            arch["modality"] = "+".join(ins) + "->" + "+".join(outs)
        fields["architecture"] = arch
    flags: dict[str, bool] = {}
    if "image" in ins:
        flags["vision"] = True
    pairs = {
        "audio_transcriptions": ("audio", "text"),
        "audio_speech": ("text", "audio"),
        "image_generation": ("text", "image"),
        "image_to_image": ("image", "image"),
    }
    for flag, (given, made) in pairs.items():
        if given in ins and made in outs:
            flags[flag] = True
    if caps.tools:
        flags["function_calling"] = True
        fields["supported_parameters"] = ["tools", "tool_choice"]
    if caps.reranker:
        flags["reranker"] = True
    if ins or outs or caps.tools or caps.reranker:
        fields["capabilities"] = flags
    if caps.context > 0:
        fields["context_length"] = caps.context
    return fields
