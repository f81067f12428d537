"""TLS for scrape targets: https targets verify certificates against one shared CA store;
http targets (engines on the box itself) load none (2.9 MB for the first client, 0.8 MB each
after, of a daemon that never speaks TLS to them)."""

from __future__ import annotations

import ssl

from collectors.scrape import _tls_for


def test_https_targets_verify_certificates_with_one_shared_store() -> None:
    first, second = _tls_for("https://a.example/metrics"), _tls_for("HTTPS://b.example/metrics")

    assert isinstance(first, ssl.SSLContext) and first is second
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] > 0


def test_http_targets_load_no_ca_store() -> None:
    assert _tls_for("http://127.0.0.1:8000/metrics") is False
