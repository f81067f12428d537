"""A target's tokens over a window: useful output and prompt tokens, requests, and what clients
abandoned, from the engines' counters' restart-safe increases (agent.cost.summarize reads them)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.storage.rolled_up import (
    COMPLETED_GENERATION_TOKENS,
    COMPLETED_PROMPT_TOKENS,
    COMPLETED_PROMPT_TOKENS_COMPUTED,
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    PROMPT_TOKENS_COMPUTED,
    REQUESTS_COMPLETED,
    REQUESTS_FINISHED,
    rolled_up,
)

OUTPUT, PROMPT_COMPUTED, PROMPT, REQUESTS = rolled_up(
    GENERATION_TOKENS, PROMPT_TOKENS_COMPUTED, PROMPT_TOKENS, REQUESTS_FINISHED
)
DONE_OUTPUT, DONE_PROMPT, DONE_PROMPT_COMPUTED, DONE_REQUESTS = rolled_up(
    COMPLETED_GENERATION_TOKENS,
    COMPLETED_PROMPT_TOKENS,
    COMPLETED_PROMPT_TOKENS_COMPUTED,
    REQUESTS_COMPLETED,
)
TOKEN_METRICS = (OUTPUT, PROMPT_COMPUTED, PROMPT, REQUESTS) + (
    DONE_OUTPUT, DONE_PROMPT, DONE_PROMPT_COMPUTED, DONE_REQUESTS)  # fmt: skip

# How a target's useful tokens were counted (``Tokens.bases``): per finished request, from the
# engine's per-request histograms (vLLM), or from its token counters (every other engine).
PER_REQUEST = "completed_requests"
COUNTERS = "token_counters"


@dataclass(frozen=True, slots=True)
class Tokens:
    output: float = 0.0  # useful output tokens: completed requests' where the engine says
    prompt: float = 0.0  # computed prompt tokens where the engine says, else all prompt tokens
    requests: float = 0.0  # finished (completed where counted per request), whatever the reason
    generated: float = 0.0  # every output token the engine generated, abandoned work included
    # Of the targets counted per request: what they generated, and their useful output. The
    # difference is what clients abandoned (other engines cannot tell: unknown, not zero).
    per_request_generated: float = 0.0
    per_request_output: float = 0.0
    bases: frozenset[str] = frozenset()
    # Requests the engine finished with reason "abort" (a client gone: vLLM's aborts, Dynamo's
    # disconnected clients, Triton's cancellations); None where no engine counts finish reasons.
    aborted: float | None = None

    def useful(self, rule: str) -> float:
        return self.output + (self.prompt if rule == "output+prompt" else 0.0)

    @property
    def abandoned(self) -> float | None:
        """Output tokens generated for requests that never completed (a client gone mid-stream,
        and what is still in flight at the window's end); None where no engine counts it."""
        if PER_REQUEST not in self.bases:
            return None
        return max(0.0, self.per_request_generated - self.per_request_output)

    @property
    def basis(self) -> str:
        """Which rule counted the useful tokens: "completed_requests", "token_counters", both
        joined by "+" where a model's targets differ, "" with no tokens at all."""
        return "+".join(sorted(self.bases))

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.output + other.output,
            self.prompt + other.prompt,
            self.requests + other.requests,
            self.generated + other.generated,
            self.per_request_generated + other.per_request_generated,
            self.per_request_output + other.per_request_output,
            self.bases | other.bases,
            _plus(self.aborted, other.aborted),
        )


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


TokenKey = tuple[str, str, str]  # (host, target, model)


ABORT = "abort"  # the canonical finish reason of a request its client abandoned


def tokens_by_target(rows: Iterable[Any]) -> dict[TokenKey, Tokens]:
    per: dict[tuple[TokenKey, str], float] = defaultdict(float)
    aborted: dict[TokenKey, float] = {}  # targets that count finish reasons: their aborts
    for host, metric, labels_json, increase in rows:
        if increase is None:
            continue
        labels = json.loads(labels_json)
        key = (host, labels.get("target", ""), labels.get("model", ""))
        per[(key, metric)] += increase
        if metric == REQUESTS and "reason" in labels:
            aborted[key] = aborted.get(key, 0.0) + (increase if labels["reason"] == ABORT else 0.0)
    return {
        key: replace(_tokens_of(key, per), aborted=aborted.get(key)) for key in {k for k, _ in per}
    }


def _tokens_of(key: TokenKey, per: Mapping[tuple[TokenKey, str], float]) -> Tokens:
    """One target's tokens: per completed request where the engine counts them (vLLM's
    per-request histograms), else from its token counters. A series the engine exposes has
    rollup rows (zero increases included) in every window it was scraped in."""

    def first(*metrics: str) -> float:
        return next((v for m in metrics if (v := per.get((key, m))) is not None), 0.0)

    generated = first(OUTPUT)
    done = per.get((key, DONE_OUTPUT))
    if done is None:
        prompt = first(PROMPT_COMPUTED, PROMPT)
        return Tokens(generated, prompt, first(REQUESTS), generated, bases=frozenset({COUNTERS}))
    prompt = first(DONE_PROMPT_COMPUTED, DONE_PROMPT)
    requests = first(DONE_REQUESTS, REQUESTS)
    return Tokens(done, prompt, requests, generated, generated, done, frozenset({PER_REQUEST}))
