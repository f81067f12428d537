"""Slack's mrkdwn text rules and message limits, for everything that writes to Slack.

Apart from :mod:`alerts.slack` so that the digest's pure formatting does not import slack_sdk
(2 MB of a daemon's memory that has no Slack configured; bench/memory.py).
"""

from __future__ import annotations

from foundation.printable import printable

# Slack's documented limits: a section's text, a message's text, blocks per message.
SECTION_LIMIT = 3000
TEXT_LIMIT = 40000
BLOCK_LIMIT = 50


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: only &, < and > are control characters ("<!channel>"); other
    control characters (NUL, bidi overrides from a scraped model name) become visible escapes."""
    text = printable(text, keep="\n")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut_escaped(text: str, limit: int) -> str:
    """Escaped ``text`` cut to ``limit`` characters without leaving half an entity ("&am")."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    amp = head.rfind("&", len(head) - 4)
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + "…"
