"""vLLM's /metrics, per version, following /work/shared/reference/engine-metrics.md §1 and §8.

Versions: "vllm-0.6" (V0 engine of 0.6.6), "vllm-0.8.5", "vllm-0.10" (0.10.2) and "vllm-0.33"
(V1 engine). Families, labels, buckets and HELP texts differ per version; HELP texts follow
vLLM's source where it was read (missing spaces included), otherwise they are ours.

What each request contributes (see traffic.Request):
- prompt_tokens_total counts every prompt token, cached ones included; prefix-cache queries
  and hits count prompt and cached tokens (tokens in every version, even where 0.8.x's HELP
  says blocks);
- TTFT, e2e, queue, prefill, decode, inference and the per-request token histograms observe
  every finished request, aborted and failed ones included; time_per_output_token and
  inter_token_latency observe each ITL; request_time_per_output_token observes the per-request
  mean TPOT of requests with at least two tokens;
- finished_reason "error" exists from 0.14 (so in "vllm-0.33" only); older versions count an
  engine error as "abort".

The families themselves are in vllm_v0.py (the V0 engine of 0.6.6: lazily created children, no
_created) and vllm_v1.py (the V1 engine: pre-created children, _created, multiprocess mode);
vllm_spec.py holds what both build them with. In multiprocess mode (``multiprocess=True``:
several API servers, 0.9+) there is no _created and no python_*/process_* family, histograms
print _sum first, and in 0.9.2-0.11 ``kv_cache_usage_perc`` has one series per API-server
process (:data:`API_SERVER_PIDS`).
"""

from __future__ import annotations

from agent.sim.expo import Family
from agent.sim.pyruntime import http_families, python_families
from agent.sim.traffic import Snapshot
from agent.sim.vllm_spec import Version
from agent.sim.vllm_v0 import v0_families
from agent.sim.vllm_v1 import API_SERVER_PIDS, v1_families

__all__ = ["API_SERVER_PIDS", "V1_VERSIONS", "VERSIONS", "families"]

V1_VERSIONS: dict[str, Version] = {
    "vllm-0.8.5": (0, 8, 5),
    "vllm-0.10": (0, 10, 2),
    "vllm-0.33": (0, 33, 0),
}
VERSIONS = ("vllm-0.6", *V1_VERSIONS)


def families(
    version: str, snap: Snapshot, *, multiprocess: bool = False, spec_tokens: int = 0
) -> list[Family]:
    """Every family of that vLLM version's /metrics, in registration order; ``spec_tokens``:
    speculative decoding's draft tokens per step (V1 only; 0: off, no spec-decode family)."""
    if version == "vllm-0.6":
        if multiprocess or spec_tokens:
            raise ValueError("the simulator renders V0 single-process, without spec decoding")
        return python_families(snap) + v0_families(snap)
    v = V1_VERSIONS[version]
    if multiprocess and v < (0, 9, 0):
        raise ValueError(f"{version} has no multiprocess mode (since 0.9)")
    created = None if multiprocess else snap.started_at
    runtime = [] if multiprocess else python_families(snap)
    engine = v1_families(v, snap, created, multiprocess, spec_tokens)
    return runtime + engine + http_families(snap, created=created)
