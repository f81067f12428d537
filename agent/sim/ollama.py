"""Ollama's ``GET /api/ps`` ("ollama"): the models loaded now, as JSON (Ollama has no /metrics).

Go's encoding/json writes it compact, in the struct's field order (``api.ProcessModelResponse``):
name, model, size, digest, details, expires_at, size_vram, context_length. Every model of the
traffic is loaded and wholly in device memory (``size_vram`` = ``size`` =
:data:`MODEL_BYTES`, the docs' example), except one named in ``offloaded``, which has a quarter
of itself in host memory. Requests, tokens and latencies do not appear: Ollama reports none.
"""

from __future__ import annotations

import json

from agent.sim.traffic import Snapshot

VERSIONS = ("ollama",)
MODEL_BYTES = 5_137_025_024
CONTENT_TYPE = "application/json; charset=utf-8"


def vram_of(model: str, offloaded: str | None = None) -> int:
    return MODEL_BYTES * 3 // 4 if model == offloaded else MODEL_BYTES


def render(snap: Snapshot, offloaded: str | None = None) -> str:
    models = [
        {
            "name": name,
            "model": name,
            "size": MODEL_BYTES,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "7.2B",
                "quantization_level": "Q4_0",
            },
            "expires_at": "2024-06-04T14:38:31.83753-07:00",
            "size_vram": vram_of(name, offloaded),
            "context_length": snap.max_model_len,
        }
        for name in snap.models
    ]
    return json.dumps({"models": models}, separators=(",", ":"))
