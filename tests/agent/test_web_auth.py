"""The pieces of /metrics' auth that need no server: Go's reading of a Basic header, and the
rate limit's token bucket on a clock of the test's making."""

from __future__ import annotations

import base64

from agent.config.web import RateLimit
from agent.daemon.web_auth import TokenBucket, credentials


def basic(raw: bytes, scheme: str = "Basic") -> str:
    return f"{scheme} {base64.b64encode(raw).decode()}"


def test_a_basic_header_is_read_as_go_reads_it() -> None:
    assert credentials(basic(b"prometheus:s3:cr:et")) == (b"prometheus", b"s3:cr:et")
    assert credentials(basic(b"prometheus:", "basic")) == (b"prometheus", b"")
    assert credentials(basic(b"no-colon")) is None
    assert credentials(basic(b"a:b", "Bearer")) is None
    assert credentials("Basic not*base64") is None
    assert credentials(None) is None and credentials("") is None


def test_the_token_bucket_allows_a_burst_then_one_per_interval() -> None:
    now = [100.0]
    bucket = TokenBucket(RateLimit(interval_seconds=10.0, burst=2), clock=lambda: now[0])
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    now[0] += 5  # half a token back
    assert bucket.allow() is False
    now[0] += 5
    assert [bucket.allow(), bucket.allow()] == [True, False]
    now[0] += 3600  # never more than the burst
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
