"""The one HTTP client every provider API source uses, and a checked reader for its answers.

Retries, rate limits and error messages behave the same for every provider, and the key stays
secret: it travels only in the ``Authorization`` header (never in a query string, which httpx
logs with the URL) and is scrubbed from any text that reaches a log line or an exception.

Answers are decoded with ``parse_float=Decimal``, so money never passes through a float.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx

from collectors.billing.base import BillingAuthError, BillingError
from foundation.redact import redact_url, redact_urls
from foundation.retry import Backoff, parse_retry_after

log = logging.getLogger(__name__)

Params = Mapping[str, str | int]

# Only these transport failures are worth another try; a bad URL or scheme never heals.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_DETAIL_KEYS = ("detail", "message", "msg", "error", "title")
_DETAIL_CHARS = 200
# The largest answer read: a page of Vast (100 charges) is tens of KB, two days of RunPod's
# hourly buckets for a thousand pods about 10 MB. Past this the answer is refused, unread, so
# an endless or gzip-bombed body cannot fill the daemon's memory.
MAX_ANSWER_BYTES = 64 << 20


class ApiError(BillingError):
    """A request failed. ``status`` is the last HTTP status, None when no response came."""

    def __init__(self, message: str, *, status: int | None, retryable: bool) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ApiClient:
    """GET/POST JSON against one provider's base URL, with Bearer auth, pacing and retries.

    ``max_retries`` counts the tries after the first. 429, 5xx, timeouts and connection errors
    wait ``foundation.retry.Backoff`` (from ``backoff_base_seconds``, capped at
    ``backoff_cap_seconds``), or a 429's ``Retry-After`` when that is longer; a Retry-After
    over ``max_retry_after_seconds`` fails at once. ``min_interval_seconds`` spaces requests for
    providers that document a minimum interval. ``sleep``, ``clock``, ``wall_clock`` and
    ``rng`` are injectable so tests never really wait.
    """

    def __init__(
        self,
        provider: str,
        base_url: str,
        token: str,
        token_variable: str,
        *,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_retries: int = 4,
        min_interval_seconds: float = 0.0,
        rng: random.Random | None = None,
        timeout_seconds: float = 30.0,
        backoff_base_seconds: float = 1.0,
        backoff_cap_seconds: float = 60.0,
        max_retry_after_seconds: float = 300.0,
        wall_clock: Callable[[], datetime] = _utcnow,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        _check_token(provider, token, token_variable)
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {max_retries}")
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.token_variable = token_variable
        self._token = token
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout_seconds)
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._rng = rng if rng is not None else random.Random()
        self._max_retries = max_retries
        self._min_interval = min_interval_seconds
        self._backoff = Backoff(backoff_base_seconds, backoff_cap_seconds)
        self._max_retry_after = max_retry_after_seconds
        self._ready_at = float("-inf")
        self._max_answer = max_answer_bytes

    def __repr__(self) -> str:
        return f"ApiClient({self.provider!r}, {redact_url(self.base_url)!r})"

    def get_json(self, path: str, params: Params | None = None) -> Any:
        """The decoded JSON body of ``GET base_url + path``."""
        return self._request("GET", path, params=params)

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """The decoded JSON body of ``POST base_url + path`` with ``body`` as JSON."""
        return self._request("POST", path, body=body)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(
        self, method: str, path: str, *, params: Params | None = None, body: object = None
    ) -> Any:
        if params is not None and "api_key" in params:
            raise ValueError("the key goes in the token, never in the query string")
        failures: list[str] = []  # what went wrong, distinct, in order
        for attempt in range(self._max_retries + 1):
            self._pace()
            try:
                response = self._send(method, path, params, body)
            except _TRANSIENT as exc:
                status, failure = None, self._describe(exc)
                delay = self._wait(attempt)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ApiError(
                    f"{self.provider} {path}: {self._describe(exc)}", status=None, retryable=False
                ) from None
            else:
                status, failure = response.status_code, f"HTTP {response.status_code}"
                if 200 <= status < 300:
                    return self._decode(path, response)
                delay = self._delay_or_raise(path, response, attempt)
            if failure not in failures:
                failures.append(failure)
            if attempt < self._max_retries:
                log.warning(
                    "%s %s %s: %s; retry %d of %d in %.1f s",
                    *(self.provider, method, path, failure, attempt + 1, self._max_retries, delay),
                )
                self._sleep(delay)
        raise ApiError(
            f"{self.provider} {path}: {self._max_retries + 1} attempts failed "
            f"({'; '.join(failures)})",
            status=status,
            retryable=True,
        )

    def _send(self, method: str, path: str, params: Params | None, body: object) -> httpx.Response:
        """The response with its body read (decompressed), refused past ``max_answer_bytes``."""
        request = self._client.build_request(
            method, self.base_url + path, params=params, json=body, headers=self._headers
        )
        response = self._client.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > self._max_answer:
                    raise ApiError(
                        f"{self.provider} {path}: the answer is larger than "
                        f"{self._max_answer:,} bytes (HTTP {response.status_code})",
                        status=response.status_code,
                        retryable=False,
                    )
                chunks.append(chunk)
        finally:
            response.close()
        # Already decompressed: the copy must not say it is still encoded.
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length")]  # fmt: skip
        return httpx.Response(
            response.status_code, headers=headers, content=b"".join(chunks), request=request
        )

    def _delay_or_raise(self, path: str, response: httpx.Response, attempt: int) -> float:
        """How long to wait before retrying this response; raises when retrying is pointless."""
        status = response.status_code
        if status in (401, 403):
            raise BillingAuthError(
                f"{self.provider}: credentials refused (HTTP {status}); check {self.token_variable}"
            )
        if status == 429:
            asked = parse_retry_after(response.headers.get("Retry-After"), self._wall_clock())
            if asked is not None and asked > self._max_retry_after:
                raise ApiError(
                    f"{self.provider} {path}: rate limited (HTTP 429); asked to wait {asked:.0f} s",
                    status=status,
                    retryable=True,
                )
            return self._wait(attempt, asked)
        if status >= 500:
            return self._wait(attempt)
        detail = self._detail(response)
        raise ApiError(
            f"{self.provider} {path}: HTTP {status}{': ' + detail if detail else ''}",
            status=status,
            retryable=False,
        )

    def _pace(self) -> None:
        if self._min_interval <= 0:
            return
        now = self._clock()
        if self._ready_at > now:
            self._sleep(self._ready_at - now)
            now = self._ready_at
        self._ready_at = now + self._min_interval

    def _wait(self, attempt: int, retry_after: float | None = None) -> float:
        # ``attempt`` counts from 0 (the first try); the retry after it is retry 1.
        return self._backoff.wait(attempt + 1, self._rng.random(), retry_after)

    def _decode(self, path: str, response: httpx.Response) -> Any:
        try:
            return json.loads(response.content, parse_float=Decimal, parse_constant=_no_constant)
        except RecursionError:  # the decoder recurses per level: thousands of [[[... exhaust it
            raise ApiError(
                f"{self.provider} {path}: the answer nests too deeply to be read "
                f"({len(response.content)} bytes)",
                status=response.status_code,
                retryable=False,
            ) from None
        except ValueError:
            ctype = response.headers.get("Content-Type", "no Content-Type")
            raise ApiError(
                f"{self.provider} {path}: the answer is not JSON (HTTP {response.status_code}, "
                f"{ctype}, {len(response.content)} bytes)",
                status=response.status_code,
                retryable=True,
            ) from None

    def _detail(self, response: httpx.Response) -> str:
        """The provider's own words about an error, short and scrubbed; "" when none."""
        try:
            payload = response.json()
        except (ValueError, RecursionError):
            return ""
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            payload = payload["error"]  # Lambda: {"error": {"code", "message"}}
        if not isinstance(payload, dict):
            return ""
        text = next((v for k in _DETAIL_KEYS if isinstance(v := payload.get(k), str) and v), "")
        return self._scrub(text[:_DETAIL_CHARS])

    def _describe(self, exc: Exception) -> str:
        text = str(exc)
        return self._scrub(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)

    def _scrub(self, text: str) -> str:
        return redact_urls(text.replace(self._token, "<redacted>"))


def _check_token(provider: str, token: str, variable: str) -> None:
    if not token:
        raise BillingAuthError(f"{provider}: no API key; set {variable}")
    # httpx quotes an illegal header value in its exception, which would leak the key.
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise BillingAuthError(f"{provider}: the API key is malformed; check {variable}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


@dataclass(frozen=True, slots=True)
class Node:
    """One value inside a provider's answer, with its path, so every error names the field.

    ``where`` says whose answer it is ("vast /api/v1/instances/"); ``path`` is the field
    path inside it ("instances[0].dph_total").
    """

    value: object
    where: str
    path: str = ""

    def __getitem__(self, key: str) -> Node:
        child = self.get(key)
        if child is None:
            problem = "is null" if key in self._object() else "missing"
            raise self._error(self._key_path(key), problem)
        return child

    def get(self, key: str) -> Node | None:
        """The child ``key``; None when it is absent or null."""
        value = self._object().get(key)
        return None if value is None else Node(value, self.where, self._key_path(key))

    def items(self) -> list[Node]:
        if not isinstance(self.value, list):
            raise self._wrong("array")
        return [Node(v, self.where, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def members(self) -> list[tuple[str, Node]]:
        """The (key, child) pairs of an object, nulls left out."""
        return [
            (k, Node(v, self.where, self._key_path(k)))
            for k, v in self._object().items()
            if v is not None
        ]

    def text(self) -> str:
        if not isinstance(self.value, str):
            raise self._wrong("string")
        return self.value

    def integer(self) -> int:
        value = self.value
        if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong("integer")
        return value

    def decimal(self) -> Decimal:
        value = self.value
        if isinstance(value, Decimal) and value.is_finite():
            return value
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong("number")
        return Decimal(value)

    def timestamp(self) -> datetime:
        """An RFC 3339 string with an offset, as UTC."""
        try:
            when = datetime.fromisoformat(self.text())
        except ValueError:
            raise self._error(self.path, f"is not an RFC 3339 time: {self.value!r:.80}") from None
        if when.tzinfo is None:
            raise self._error(self.path, f"has no UTC offset: {self.value!r}")
        try:
            return when.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first UTC instant
            raise self._error(self.path, f"is out of range: {self.value!r}") from None

    def unix_time(self) -> datetime:
        """Seconds since the epoch (integer or fractional), as UTC."""
        try:
            return datetime.fromtimestamp(float(self.decimal()), UTC)
        except (OverflowError, OSError, ValueError):
            raise self._error(self.path, f"is not a unix time: {self.value}") from None

    def _object(self) -> dict[str, object]:
        if not isinstance(self.value, dict):
            raise self._wrong("object")
        return self.value

    def _key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _wrong(self, expected: str) -> BillingError:
        return self._error(self.path, f"is {_kind(self.value)}, expected {expected}")

    def _error(self, path: str, problem: str) -> BillingError:
        # A changed schema does not heal by itself: not retryable.
        return BillingError(f"{self.where}: {path or 'the answer'} {problem}", retryable=False)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
