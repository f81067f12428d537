"""Text from the outside world made safe to show: control characters become visible escapes.

A label value scraped from an engine (a model name) reaches reports, terminals and Slack. A NUL,
an ANSI escape sequence or a bidi override in it (U+202E turns "gpt-4o\u202eslx.exe" into a name
that reads backwards) must not drive the terminal, cut a C string or reorder what people read,
so every such character is shown as its Python escape (``\\x00``, ``\\u202e``): the reader sees
that something odd was there, and what. It lives in the ground every package stands on, so
that collectors, alerts and the agent's report renderers share one rule.
"""

from __future__ import annotations

import re

# C0 controls and DEL, C1 controls, the bidi embeddings, overrides and isolates, the implicit
# direction marks, and the line and paragraph separators (they break a line where none may be).
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ALL = re.compile(f"[{_CONTROLS}]")


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every control character except those in ``keep`` (say "\\n\\t", where the
    format allows them) replaced by its escape; unchanged when it has none."""
    if not _ALL.search(text):
        return text
    return _ALL.sub(lambda m: m.group(0) if m.group(0) in keep else _escape(m.group(0)), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
