"""``HOST:PORT`` listen addresses, as ``daemon.metrics_listen`` and ``[otlp]`` take them."""

from __future__ import annotations


def parse_listen(listen: str) -> tuple[str, int] | None:
    """'HOST:PORT' (IPv6 as '[::1]:9877') into (host, port), or None when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)
