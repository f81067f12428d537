"""One entry point for every simulated /metrics: ``render(version, state)``.

Versions (:data:`VERSIONS`): "vllm-0.6", "vllm-0.8.5", "vllm-0.10", "vllm-0.33", "sglang-0.5",
"tgi-3", "llamacpp", "dcgm", "triton-trtllm", "nim", "lmdeploy", "dynamo"; and "ollama", JSON
rather than a /metrics text (:data:`ALL_VERSIONS`). Options:
- ``multiprocess``: vLLM 0.10/0.33 with several API servers (SGLang is always multiprocess);
- ``model``: which model a label-less engine (TGI, llama.cpp) shows; default the first;
- ``priority``: SGLang with ``priority=""`` on every series;
- ``spec_tokens``: vLLM V1 with speculative decoding, that many draft tokens per step.
"""

from __future__ import annotations

from agent.sim import dcgm, dynamo, llamacpp, lmdeploy, nim, ollama, sglang, tgi, triton, vllm
from agent.sim.expo import Family, render_openmetrics, render_text
from agent.sim.traffic import Snapshot, Traffic

VERSIONS = (
    *vllm.VERSIONS, *sglang.VERSIONS, *tgi.VERSIONS, *llamacpp.VERSIONS, *dcgm.VERSIONS,
    *triton.VERSIONS, *nim.VERSIONS, *lmdeploy.VERSIONS, *dynamo.VERSIONS,
)  # fmt: skip
# The /metrics texts above, and what is served that is no /metrics text (Ollama's /api/ps).
ALL_VERSIONS = (*VERSIONS, *ollama.VERSIONS)
# Engines whose whole text one function of the snapshot writes (no option applies to them).
_PLAIN = {"triton-trtllm": triton.render, "nim": nim.render, "lmdeploy": lmdeploy.render,
          "dynamo": dynamo.render, "ollama": ollama.render}  # fmt: skip

TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
TEXT_1_0_0 = "text/plain; version=1.0.0; charset=utf-8"
TEXT_BARE = "text/plain; version=0.0.4"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_CONTENT_TYPES = {
    "vllm-0.6": TEXT_0_0_4,
    "vllm-0.8.5": TEXT_0_0_4,
    "vllm-0.10": TEXT_0_0_4,
    "vllm-0.33": TEXT_1_0_0,  # pins only prometheus_client>=0.18; 0.23+ says 1.0.0
    "sglang-0.5": TEXT_0_0_4,
    "tgi-3": TEXT_BARE,
    "llamacpp": TEXT_BARE,
    "dcgm": TEXT_BARE,
    "triton-trtllm": TEXT_BARE,  # prometheus-cpp
    "nim": TEXT_0_0_4,
    "lmdeploy": TEXT_0_0_4,
    "dynamo": TEXT_BARE,  # the Rust prometheus crate's TextEncoder
    "ollama": ollama.CONTENT_TYPE,  # /api/ps, JSON
}
# Served by prometheus_client's make_asgi_app, which honours Accept: OpenMetrics on request.
NEGOTIATES_OPENMETRICS = frozenset({"vllm-0.6", "sglang-0.5"})


def content_type(version: str) -> str:
    _check(version)
    return _CONTENT_TYPES[version]


def _check(version: str) -> None:
    if version not in ALL_VERSIONS:
        raise ValueError(f"unknown version {version!r}; one of {ALL_VERSIONS}")


def _snapshot(state: Traffic | Snapshot) -> Snapshot:
    return state.snapshot() if isinstance(state, Traffic) else state


def families(
    version: str,
    state: Traffic | Snapshot,
    *,
    multiprocess: bool = False,
    priority: bool = False,
    spec_tokens: int = 0,
) -> tuple[list[Family], bool]:
    """The prometheus_client families of a vLLM or SGLang version, and whether multiprocess."""
    snap = _snapshot(state)
    if version in vllm.VERSIONS:
        fams = vllm.families(version, snap, multiprocess=multiprocess, spec_tokens=spec_tokens)
        return fams, multiprocess
    if version in sglang.VERSIONS:
        return sglang.families(snap, priority=priority), True
    raise ValueError(f"{version} is not written by prometheus_client")


def render(
    version: str,
    state: Traffic | Snapshot,
    *,
    multiprocess: bool = False,
    model: str | None = None,
    priority: bool = False,
    spec_tokens: int = 0,
) -> str:
    """The exact /metrics text of ``version`` for the state's current traffic."""
    _check(version)
    snap = _snapshot(state)
    if multiprocess and version not in vllm.VERSIONS:
        raise ValueError(f"{version} has no multiprocess option")
    if spec_tokens and version not in vllm.VERSIONS:
        raise ValueError(f"{version} has no spec_tokens option")
    if version in vllm.VERSIONS or version in sglang.VERSIONS:
        fams, mp = families(
            version, snap, multiprocess=multiprocess, priority=priority, spec_tokens=spec_tokens
        )
        return render_text(fams, multiprocess=mp)
    if version == "tgi-3":
        return tgi.render(snap, model)
    if version == "llamacpp":
        return llamacpp.render(snap, model)
    if version in _PLAIN:
        return _PLAIN[version](snap)
    return dcgm.render(snap)


def render_for_accept(
    version: str,
    state: Traffic | Snapshot,
    accept: str,
    *,
    multiprocess: bool = False,
    model: str | None = None,
    priority: bool = False,
    spec_tokens: int = 0,
) -> tuple[str, str]:
    """(body, content type) as the server answers a request with that Accept header."""
    if version in NEGOTIATES_OPENMETRICS and "application/openmetrics-text" in accept:
        fams, mp = families(
            version, state, multiprocess=multiprocess, priority=priority, spec_tokens=spec_tokens
        )
        return render_openmetrics(fams, multiprocess=mp), OPENMETRICS
    body = render(
        version,
        state,
        multiprocess=multiprocess,
        model=model,
        priority=priority,
        spec_tokens=spec_tokens,
    )
    return body, content_type(version)
