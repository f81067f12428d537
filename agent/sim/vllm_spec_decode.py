"""vLLM V1's speculative-decoding counters (``vllm/v1/spec_decode/metrics.py``), registered only
when vLLM runs with a draft method: the simulator prints them when asked for ``spec_tokens``
(``num_speculative_tokens``, k) and not otherwise.

The truth, per request (what a test recomputes from the requests served): the prefill gives the
first token; each decode step then proposes k draft tokens, the target model accepts ``a`` of
them and adds one of its own, so a step emits a + 1 tokens. Request ``seq`` accepts
``a = seq % (k + 1)`` per step (0 to k, so acceptance varies across the cycle) until its
remaining g - 1 tokens are out; its last step accepts only what is left. Hence ``steps =
ceil((g - 1) / (a + 1))`` drafts, ``k x steps`` draft tokens and ``g - 1 - steps`` accepted.
Dropped streams count too: the engine did their work.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.sim.expo import Family, Scalar
from agent.sim.traffic import Request
from agent.sim.vllm_spec import Builder, Child, counter


def drafts(r: Request, k: int) -> tuple[int, int, int, tuple[int, ...]]:
    """(drafts, draft tokens, accepted tokens, accepted per draft position) of one request."""
    rest = r.generation_tokens - 1
    if k <= 0 or rest <= 0:
        return 0, 0, 0, (0,) * max(k, 0)
    per_step = r.seq % (k + 1)
    steps = -(-rest // (per_step + 1))
    last = rest - (steps - 1) * (per_step + 1) - 1  # what the last step accepted
    per_pos = tuple((steps - 1) * (per_step > i) + (last > i) for i in range(k))
    return steps, k * steps, rest - steps, per_pos


def spec_decode_families(b: Builder, k: int) -> None:
    """Add the four spec-decode families (children pre-created at 0, like vLLM's)."""

    def total(field: int) -> Callable[[Child], float]:
        def value(c: Child) -> float:
            return float(sum(drafts(r, k)[:3][field] for r in c.requests + c.dropped))

        return value

    b.add(
        (
            counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", total(0)),
            counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", total(1)),
            counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", total(2)),
        )
    )
    series = tuple(
        Scalar(
            c.labels + (("position", str(i)),),
            float(sum(drafts(r, k)[3][i] for r in c.requests + c.dropped)),
        )
        for c in b.children
        for i in range(k)
    )
    help_ = "Accepted tokens per draft position."
    b.families.append(
        Family("vllm:spec_decode_num_accepted_tokens_per_pos", "counter", help_, series, b.created)
    )
