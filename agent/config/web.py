"""The /metrics web configuration: Prometheus' exporter-toolkit web config file, read as it is.

``[daemon] web_config_file`` names the same YAML file node_exporter and every exporter built on
prometheus/exporter-toolkit read with ``--web.config.file`` (docs/web-configuration.md there): a
fleet reuses its file (often one Kubernetes Secret) and its bcrypt hashes stay out of the TOML.
The semantics are the toolkit's (web/tls_config.go, web/handler.go): an empty file serves plain
HTTP; TLS is on when any of cert, key or client CA settings is given, and then needs a
certificate and a key; relative paths are relative to the file; a client CA needs a client auth
policy; users are bcrypt hashes. Where Python's ssl module cannot do what Go's does, the key is
an error naming the reason, never silently ignored (docs/metrics-security.md lists them).

This module parses and checks; :func:`server_context` builds the ssl context, so check-config
proves the files load. The daemon re-reads the file for every connection (agent.daemon.web)."""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.config.reader import Reader
from agent.config.secret import Secret
from alerts.duration import DurationError, parse_duration
from foundation.printable import printable

MAX_FILE_BYTES = 1024 * 1024  # a web config, with inline PEM, is a few kilobytes

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's tls.ClientAuthType names, as the toolkit spells them ("RequireClientCert" is its old
# name for RequireAnyClientCert).
VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY = "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"
CLIENT_AUTH = ("NoClientCert", "RequestClientCert", "RequireAnyClientCert", VERIFY_IF_GIVEN,
               REQUIRE_AND_VERIFY)  # fmt: skip
UNVERIFIED = ("RequireAnyClientCert", "RequireClientCert")
# Go's secure suites (tls.CipherSuites()) by their OpenSSL names. TLS 1.3 suites are not
# configurable in Go either: accepted and without effect, as there.
CIPHERS = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1",
          "X25519": "X25519"}  # fmt: skip
# The response headers the toolkit lets a file set, with the values it accepts (None: any).
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
# What htpasswd -B and Go's bcrypt write: $2a$, $2b$ or $2y$, a two-digit cost, 53 characters.
BCRYPT = re.compile(r"\$2[aby]?\$(\d\d)\$[./A-Za-z0-9]{53}")
TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
            "client_ca_file", "client_allowed_sans", "min_version", "max_version",
            "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"}  # fmt: skip


class FileProblem(OSError):
    """A file the web config names cannot be read; ``key`` is the setting that names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class WebConfigError(Exception):
    """The web config file has problems; each is 'key.path: what is wrong'."""

    def __init__(self, source: str, problems: list[str]) -> None:
        # Key names come from the file: shown escaped, as ConfigError shows them, since the
        # daemon logs these when the file turns bad under it.
        self.source = printable(source)
        self.problems = [printable(p) for p in problems]
        super().__init__(f"{self.source}: " + "; ".join(self.problems))


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``tls_server_config``; PEM text given inline instead of a file is in ``cert``/``key``."""

    cert_file: Path | None
    key_file: Path | None
    cert: str | None = field(default=None, repr=False)
    key: Secret | None = None
    client_ca_file: Path | None = None
    client_ca: str | None = field(default=None, repr=False)
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: tuple[str, ...] = ()  # OpenSSL names; empty: OpenSSL's defaults
    prefer_server_cipher_suites: bool = True
    curve: str | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """The files a handshake reads: a change to any of them must take effect."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: a token bucket of ``burst`` tokens, one back every ``interval_seconds``."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The whole file. No TLS (``tls`` None) and no users is plain, open HTTP, as before."""

    source: str
    tls: TlsConfig | None = None
    users: Mapping[str, Secret] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: RateLimit | None = None


def check_web_config_file(r: Reader, table: dict[str, Any], key: str, base: Path) -> str | None:
    """``[daemon] web_config_file``: the path (relative to the gpuwatch.toml that names it),
    with the file's every problem recorded under ``key``; None when unset or ''."""
    name = r.optional_string(table, key)
    if not name:
        return None
    path = base / name
    try:
        read_web_config(path)
    except WebConfigError as exc:
        for problem in exc.problems:
            r.problem(key, f"{path}: {problem}")
    return str(path)


def read_web_config(path: Path) -> WebConfig:
    """Parse and check ``path``, loading its certificate, key and CA once to prove they load.

    Raises:
        WebConfigError: every problem, each with its key path in the file.
    """
    source = str(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(source, ["larger than 1 MiB: not a web config file"])
    try:
        data = yaml.load(raw, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise WebConfigError(source, [f"YAML error: {_yaml_problem(exc)}"]) from None
    if data is None:  # an empty file: plain HTTP, no users (the toolkit's web_config_empty.yml)
        return WebConfig(source)
    r = Reader({})
    if not isinstance(data, dict):
        raise WebConfigError(source, [f"YAML error: expected a mapping, got {_what(data)}"])
    top = r.table(data, "", {"tls_server_config", "http_server_config", "basic_auth_users",
                             "rate_limit"})  # fmt: skip
    config = WebConfig(
        source,
        tls=_tls(r, top, path.parent),
        users=_users(r, top),
        headers=_headers(r, top),
        rate_limit=_rate_limit(r, top),
    )
    tls = config.tls
    if tls is not None and (tls.cert_file or tls.cert) and (tls.key_file or tls.key):
        try:  # the files exist, are PEM, and the key is the certificate's
            server_context(tls)
        except FileProblem as exc:
            r.problem(f"tls_server_config.{exc.key}", str(exc))
        except ssl.SSLError as exc:
            r.problem("tls_server_config", str(exc))
    if r.problems:
        raise WebConfigError(source, r.problems)
    return config


def _tls(r: Reader, top: dict[str, Any], base: Path) -> TlsConfig | None:
    t = r.sub(top, "tls_server_config", TLS_KEYS)
    p = "tls_server_config."
    text = {k: _text(r, t, p + k) for k in ("cert", "key", "client_ca", "cert_file", "key_file",
                                            "client_ca_file", "client_auth_type")}  # fmt: skip
    if not any(text.values()):  # the toolkit's IsEnabled: nothing that turns TLS on
        return None
    for what in ("cert", "key"):
        if not text[what] and not text[f"{what}_file"]:
            r.problem(p + f"{what}_file", f"missing one of {what} or {what}_file")
        if text[what] and text[f"{what}_file"]:
            r.problem(p + what, f"{what} and {what}_file both given: give one")
    auth = _client_auth(r, p + "client_auth_type", text["client_auth_type"] or "NoClientCert")
    has_ca = bool(text["client_ca_file"] or text["client_ca"])
    if has_ca and auth == "NoClientCert":
        r.problem(p + "client_ca_file",
                  "client CA's have been configured without a Client Auth Policy "
                  "(set client_auth_type: RequireAndVerifyClientCert)")  # fmt: skip
    sans = _strings(r, t, p + "client_allowed_sans")
    if sans is not None and auth not in (VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY):
        r.problem(p + "client_allowed_sans",
                  "a SAN proves nothing on a certificate that is not verified: "
                  f"needs client_auth_type {REQUIRE_AND_VERIFY}")  # fmt: skip
    key = text["key"]
    return TlsConfig(
        cert_file=_path(base, text["cert_file"]),
        key_file=_path(base, text["key_file"]),
        cert=text["cert"],
        key=Secret(key, "tls_server_config.key") if key else None,
        client_ca_file=_path(base, text["client_ca_file"]),
        client_ca=text["client_ca"],
        client_auth_type=auth,
        client_allowed_sans=sans,
        min_version=_version(r, t, p + "min_version", ssl.TLSVersion.TLSv1_2),
        max_version=_version(r, t, p + "max_version", ssl.TLSVersion.TLSv1_3),
        ciphers=_ciphers(r, t, p + "cipher_suites"),
        prefer_server_cipher_suites=r.boolean(t, p + "prefer_server_cipher_suites", True),
        curve=_curve(r, t, p + "curve_preferences"),
    )


def _client_auth(r: Reader, key: str, value: str) -> str:
    if value in UNVERIFIED:
        why = "accepts any certificate without checking it, which Python's ssl cannot do"
        r.problem(key, f"{value} {why}; use {REQUIRE_AND_VERIFY} and client_ca_file")
        return REQUIRE_AND_VERIFY
    if value not in CLIENT_AUTH:
        r.problem(key, f"invalid ClientAuth: {value!r} (one of {', '.join(CLIENT_AUTH)})")
        return "NoClientCert"
    return value


def _version(r: Reader, t: dict[str, Any], key: str, default: ssl.TLSVersion) -> ssl.TLSVersion:
    name = _text(r, t, key)
    if name is None:
        return default
    if name not in TLS_VERSIONS:
        r.problem(key, f"unknown TLS version: {name!r} (one of {', '.join(TLS_VERSIONS)})")
        return default
    return TLS_VERSIONS[name]


def _ciphers(r: Reader, t: dict[str, Any], key: str) -> tuple[str, ...]:
    names = _strings(r, t, key) or ()
    unknown = [n for n in names if n not in CIPHERS]
    if unknown:
        r.problem(key, f"unknown cipher: {', '.join(unknown)} (Go's secure suites: "
                       f"{', '.join(CIPHERS)})")  # fmt: skip
    return tuple(c for n in names if (c := CIPHERS.get(n)))


def _curve(r: Reader, t: dict[str, Any], key: str) -> str | None:
    names = _strings(r, t, key)
    if not names:
        return None
    unknown = [n for n in names if n not in CURVES]
    if unknown:
        r.problem(key, f"unknown curve: {', '.join(unknown)} (one of {', '.join(CURVES)})")
        return None
    if len(names) > 1:  # Python's ssl sets one group (SSLContext.set_ecdh_curve), no list
        r.problem(key, "gpuwatch can restrict the key exchange to one curve, not a list of "
                       f"preferences: keep one of {', '.join(names)}")  # fmt: skip
        return None
    return CURVES[names[0]]


def _users(r: Reader, top: dict[str, Any]) -> dict[str, Secret]:
    users = top.get("basic_auth_users")
    if users is None:
        return {}
    if not isinstance(users, dict):
        r.problem("basic_auth_users", f"expected a mapping user: bcrypt hash, got {_what(users)}")
        return {}
    out: dict[str, Secret] = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{user}"
        # The hash is shown nowhere: the toolkit treats it as a secret, and so do we.
        if not isinstance(user, str) or not isinstance(hashed, str) or not _bcrypt(hashed):
            r.problem(key, "not a bcrypt hash: hashedSecret too short to be a bcrypted password "
                           "(make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)")  # fmt: skip
            continue
        out[user] = Secret(hashed, key)
    return out


def _bcrypt(hashed: str) -> bool:
    match = BCRYPT.fullmatch(hashed)
    return match is not None and 4 <= int(match.group(1)) <= 31


def _headers(r: Reader, top: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    h = r.sub(top, "http_server_config", {"http2", "headers"})
    # gpuwatch speaks HTTP/1.1 only; http2 is accepted so the toolkit's files load unchanged.
    r.boolean(h, "http_server_config.http2", True)
    headers = h.get("http_server_config.headers") or {}
    if not isinstance(headers, dict):
        r.problem("http_server_config.headers", f"expected a mapping, got {_what(headers)}")
        return ()
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        key = f"http_server_config.headers.{name}"
        text = str(value) if isinstance(value, (str, int, float)) else None
        if name not in HEADERS:
            r.problem(key, f"HTTP header {name!r} can not be configured "
                           f"(one of {', '.join(HEADERS)})")  # fmt: skip
        elif text is None or ((allowed := HEADERS[name]) and text not in allowed):
            expected = ", ".join(HEADERS[name] or ("a string",))
            r.problem(key, f"invalid value for {name}. Expected one of: {expected}")
        elif text:  # blank: unset, as the toolkit says
            out.append((str(name), text))
    return tuple(out)


def _rate_limit(r: Reader, top: dict[str, Any]) -> RateLimit | None:
    t = r.sub(top, "rate_limit", {"interval", "burst"})
    interval = t.get("rate_limit.interval", 0)
    try:  # Go durations ("1s", "500ms"); 0 or absent turns the limiter off
        seconds = 0.0 if interval in (0, "0") else parse_duration(interval)
    except DurationError as exc:
        r.problem("rate_limit.interval", str(exc))
        return None
    burst = t.get("rate_limit.burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        r.problem("rate_limit.burst", f"expected a whole number of at least 0, got {_what(burst)}")
        return None
    return RateLimit(seconds, burst) if seconds > 0 else None


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """An ssl context for one handshake under ``tls``, files read now.

    Raises:
        FileProblem: a file cannot be read (the message names the key and the path).
        ssl.SSLError: the certificate and key do not load or do not match.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = tls.min_version, tls.max_version
    if tls.ciphers:
        ctx.set_ciphers(":".join(tls.ciphers))
    if not tls.prefer_server_cipher_suites:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve:
        ctx.set_ecdh_curve(tls.curve)
    # Read first, whatever the policy, as the toolkit does: a CA file that is not there is
    # an error even where no client certificate is asked for.
    ca = _read(tls.client_ca_file, "client_ca_file") if tls.client_ca_file else tls.client_ca
    _load_pair(ctx, tls)
    if tls.client_auth_type in (VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY):
        ctx.verify_mode = (ssl.CERT_REQUIRED if tls.client_auth_type == REQUIRE_AND_VERIFY
                           else ssl.CERT_OPTIONAL)  # fmt: skip
        if ca:
            try:
                ctx.load_verify_locations(cadata=ca)
            except ssl.SSLError as exc:
                raise FileProblem("client_ca_file", f"no PEM certificate in the client CA "
                                                    f"({_reason(exc)})") from None  # fmt: skip
        else:  # as Go: no client CA given means the system's roots
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    # RequestClientCert asks for a certificate it never checks nor uses: the same access as
    # NoClientCert, which is what Python's ssl can do (no certificate request is sent).
    return ctx


def _load_pair(ctx: ssl.SSLContext, tls: TlsConfig) -> None:
    cert = _read(tls.cert_file, "cert_file") if tls.cert_file else (tls.cert or "")
    key = _read(tls.key_file, "key_file") if tls.key_file else (tls.key.reveal() if tls.key else "")
    # load_cert_chain reads files only; a memfd keeps the key off every disk (read-only roots).
    fd = os.memfd_create("gpuwatch-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, f"{cert.strip()}\n{key.strip()}\n".encode())
        try:
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        except ssl.SSLError as exc:  # says which library check failed, never the key
            raise ssl.SSLError(
                f"failed to load the certificate and its key ({_reason(exc)}): "
                "cert and key must be PEM and belong together"
            ) from None
    finally:
        os.close(fd)


def _read(path: Path, key: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not PEM text"
        raise FileProblem(key, f"failed to read {key} ({path}): {reason or exc}") from None


def _reason(exc: ssl.SSLError) -> str:
    return exc.reason or exc.strerror or type(exc).__name__


def _text(r: Reader, t: dict[str, Any], key: str) -> str | None:
    """A string setting; '' counts as unset, as Go's zero value does."""
    return r.optional_string(t, key) or None


def _strings(r: Reader, t: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = t.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        r.problem(key, f"expected a list of strings, got {_what(value)}")
        return None
    return tuple(value)


def _path(base: Path, value: str | None) -> Path | None:
    return None if value is None else base / value  # an absolute value stays as it is


def _what(value: object) -> str:
    kinds: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}
    return kinds.get(type(value), type(value).__name__)


def _yaml_problem(exc: Exception) -> str:
    """What is wrong and where, without PyYAML's quote of the line: it may hold a hash or
    the inline key."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        return f"{what} (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    return type(exc).__name__


class _StrictLoader(yaml.SafeLoader):
    """YAML with duplicate keys refused, like the toolkit's yaml.UnmarshalStrict: a key given
    twice is a mistake, and the last one silently winning hides it."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
