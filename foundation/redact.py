"""Credentials out of URLs, wherever a URL is logged, stored or printed.

A URL a user configures may carry a credential: a password in its userinfo
(``http://user:PASS@host``, ``postgresql+psycopg://gw:PASS@db/gw``), a token as the lone user
of an http URL (``https://TOKEN@host``), or a query parameter (``?token=...``,
``&X-Amz-Signature=...``).
:func:`redact_url` hides each of those and keeps everything else byte for byte, so an error
still says which host and path failed; :func:`redact_urls` does the same for every URL inside
free text (an exception's message, a log line). Both never raise: text that does not parse as a
URL is redacted by pattern instead.

It lives in the ground every package stands on, so that collectors, alerts and every room of the
agent use the one rule.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

HIDDEN = "***"
# Query parameter names that carry credentials: matched anywhere in the name, ignoring case,
# so "access_token", "api_key", "X-Amz-Signature", "X-Goog-Credential" and Azure's "sig" are
# hidden. Hiding a harmless "author" too costs nothing.
_SECRET_PARAM = re.compile(r"token|key|secret|pass|pwd|sig|auth|credential|session", re.I)
# A URL inside free text: a scheme, "://", then up to whitespace, a quote or an angle bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_TRAILING = ").,;:!?]}"
# Fallbacks for a URL that urlsplit refuses (a bad port, an unclosed IPv6 bracket).
_USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")
_PARAM = re.compile(r"(?<=[?&;])([^=&;#\s]*)=([^&;#\s]*)")


def redact_url(url: str) -> str:
    """``url`` with its userinfo password (or an http URL's lone user) and every credential-
    named query parameter's value replaced by ``***``; otherwise unchanged."""
    if "://" not in url:
        return _redact_params(url) if "?" in url else url
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        return _redact_params(_USERINFO.sub(f"{HIDDEN}@", url))
    scheme, rest = url.split("://", 1)
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    return f"{scheme}://{_authority(scheme, authority)}{_redact_params(tail)}"


def redact_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    return _URL_IN_TEXT.sub(_in_text, text)


def _in_text(match: re.Match[str]) -> str:
    # Punctuation right after a URL belongs to the sentence ("(http://h/m): refused").
    found = match.group(0)
    url = found.rstrip(_TRAILING)
    return redact_url(url) + found[len(url) :]


def _authority(scheme: str, authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return authority
    user, colon, _password = userinfo.partition(":")
    if colon:
        return f"{user}:{HIDDEN}@{host}"
    # A lone user of a database URL is a role name, worth showing; of an http URL it is how
    # tokens are usually passed (https://TOKEN@host).
    if scheme.lower().startswith(("http", "ws")):
        return f"{HIDDEN}@{host}"
    return authority


def _redact_params(tail: str) -> str:
    path, question, query = tail.partition("?")
    if not question:
        return tail
    query, hash_, fragment = query.partition("#")
    return f"{path}?{_PARAM.sub(_param, '&' + query)[1:]}{hash_}{fragment}"


def _param(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    return f"{name}={HIDDEN}" if value and _SECRET_PARAM.search(name) else match.group(0)
