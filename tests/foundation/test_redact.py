"""Credentials out of URLs (collectors/redact.py), controls out of text (printable.py)."""

from __future__ import annotations

import pytest

from foundation.printable import printable
from foundation.redact import redact_url, redact_urls


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:PASS@host:8000/metrics", "http://user:***@host:8000/metrics"),
        ("https://TOKEN@host/metrics", "https://***@host/metrics"),
        ("postgresql+psycopg://gw:PASS@db:5432/gw", "postgresql+psycopg://gw:***@db:5432/gw"),
        ("postgresql+psycopg://postgres@db/gw", "postgresql+psycopg://postgres@db/gw"),
        ("http://h/m?token=SECRET&model=x", "http://h/m?token=***&model=x"),
        ("http://h/m?a=1&api_key=SECRET#frag", "http://h/m?a=1&api_key=***#frag"),
        (
            "https://b.s3/o?X-Amz-Credential=SECRET&X-Amz-Signature=SECRET&x=1",
            "https://b.s3/o?X-Amz-Credential=***&X-Amz-Signature=***&x=1",
        ),
        ("https://acct.blob/c?sv=2020&sig=SECRET", "https://acct.blob/c?sv=2020&sig=***"),
        ("postgresql://u@h/db?password=SECRET", "postgresql://u@h/db?password=***"),
        ("http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000/metrics"),
        ("sqlite:////var/lib/gpuwatch/gpuwatch.db", "sqlite:////var/lib/gpuwatch/gpuwatch.db"),
        ("not a url", "not a url"),
        # urlsplit refuses these; the pattern fallback still hides the credentials.
        ("http://user:PASS@host:notaport/?secret=SECRET", "http://***@host:notaport/?secret=***"),
        ("http://user:PASS@[::1/?token=SECRET", "http://***@[::1/?token=***"),
    ],
)
def test_a_url_keeps_everything_but_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "SECRET" not in shown and "PASS" not in shown and "TOKEN" not in shown


def test_every_url_inside_free_text_is_redacted() -> None:
    text = (
        "ConnectError for url 'http://u:PASS@h/m?token=SECRET': refused; "
        "redirect to https://h2/x?sig=SECRET"
    )
    out = redact_urls(text)
    assert "PASS" not in out and "SECRET" not in out
    assert "'http://u:***@h/m?token=***'" in out and "https://h2/x?sig=***" in out
    sentence = "target t (http://u:PASS@h:1/metrics?token=SECRET): refused."
    assert redact_urls(sentence) == "target t (http://u:***@h:1/metrics?token=***): refused."


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("llama\x00-8b", "llama\\x00-8b"),
        ("gpt\u202eexe.txt", "gpt\\u202eexe.txt"),
        ("a\u2066b\u2069", "a\\u2066b\\u2069"),
        ("red\x1b[31mtext", "red\\x1b[31mtext"),
        ("c1\x85\x9b", "c1\\x85\\x9b"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain-model_1.0 / ünïcödé 模型", "plain-model_1.0 / ünïcödé 模型"),
    ],
)
def test_control_characters_become_visible_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_newline_and_tab_stay_where_the_format_allows_them() -> None:
    assert printable("a\nb\tc\rd", keep="\n\t") == "a\nb\tc\\x0dd"
    assert printable("a\nb") == "a\\x0ab"
