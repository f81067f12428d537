"""The known workload against /v1/completions, and what the API said it cost.

Every completion asks for a fixed ``max_tokens`` with ``ignore_eos``, so the engine generates
exactly that many (a random model would otherwise stop at a random end-of-sequence token).
``Ledger`` keeps the API's own ``usage`` fields: the truth useful tokens are checked against.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from tests.realvllm.server import MODEL_NAME


@dataclass
class Ledger:
    completion_tokens: list[int] = field(default_factory=list)  # one per completed request
    prompt_tokens: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)  # HTTP status of each refused request
    abandoned: int = 0  # streams the client closed mid-way
    # (seconds the client waited, completion tokens) of each request timed on its own
    timed: list[tuple[float, int]] = field(default_factory=list)

    def record(self, usage: dict[str, int], max_tokens: int) -> None:
        assert usage["completion_tokens"] == max_tokens, usage  # ignore_eos: exactly that many
        self.completion_tokens.append(usage["completion_tokens"])
        self.prompt_tokens.append(usage["prompt_tokens"])


def _body(prompt: str, max_tokens: int, stream: bool) -> dict[str, object]:
    body: dict[str, object] = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def complete(base: str, ledger: Ledger, prompt: str, max_tokens: int) -> None:
    began = time.monotonic()
    r = httpx.post(base + "/v1/completions", json=_body(prompt, max_tokens, False), timeout=120)
    waited = time.monotonic() - began
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length", choice
    ledger.record(r.json()["usage"], max_tokens)
    ledger.timed.append((waited, r.json()["usage"]["completion_tokens"]))


def complete_concurrently(base: str, ledger: Ledger, jobs: list[tuple[str, int]]) -> None:
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for future in [pool.submit(complete, base, ledger, p, n) for p, n in jobs]:
            future.result()


def _events(response: httpx.Response) -> list[dict[str, object]]:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line.removeprefix("data: ")))
    return out


def stream(base: str, ledger: Ledger, prompt: str, max_tokens: int) -> None:
    """A stream read to its end; its usage comes in the last chunk (include_usage)."""
    body = _body(prompt, max_tokens, True)
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        events = _events(r)
    usage = events[-1].get("usage")
    assert isinstance(usage, dict), events[-1]
    ledger.record(usage, max_tokens)


def abandon(base: str, ledger: Ledger, prompt: str, max_tokens: int, after: int = 3) -> None:
    """A stream the client closes after ``after`` chunks, as a user closing a chat tab."""
    body = _body(prompt, max_tokens, True)
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen >= after:
                break
    ledger.abandoned += 1


def reject(base: str, ledger: Ledger, prompt: str) -> None:
    """A prompt longer than the model's context: refused before it reaches the engine."""
    r = httpx.post(base + "/v1/completions", json=_body(prompt, 8, False), timeout=60)
    assert r.status_code == 400, (r.status_code, r.text)
    ledger.rejected.append(r.status_code)
