"""/metrics with TLS and basic auth, live: the daemon's MetricsServer on 127.0.0.1 under an
exporter-toolkit web config, scraped with httpx through throwaway CAs made at test time (the
handshake and auth cases of the toolkit's web/tls_config_test.go and web/handler_test.go)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest

from agent.config.settings import load_config
from agent.daemon.exposition import LatestRoundCollector
from agent.daemon.service import ListenError, MetricsServer
from tests.agent.daemon_harness import free_port
from tests.agent.web_pki import Pki

DATA = Path(__file__).parent / "data" / "web_config"
Serve = Callable[[str], str]  # web config text -> the /metrics URL (https when TLS is on)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Serve]:
    """Start a MetricsServer reading ``tmp_path/web.yml``, written from the text given."""
    servers: list[MetricsServer] = []

    def start(text: str) -> str:
        (tmp_path / "web.yml").write_text(text)
        server = MetricsServer(f"127.0.0.1:{free_port()}", LatestRoundCollector(),
                               str(tmp_path / "web.yml"))  # fmt: skip
        server.start()
        servers.append(server)
        scheme = "https" if "tls_server_config" in text else "http"
        return f"{scheme}://127.0.0.1:{server.port}/metrics"

    yield start
    for server in servers:
        server.stop()


def tls(pki: Pki, extra: str = "") -> str:
    return (
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
        + extra
    )


def get(url: str, verify: ssl.SSLContext | bool = True, **kw: object) -> httpx.Response:
    return httpx.get(url, verify=verify, timeout=5, **kw)  # type: ignore[arg-type]


def serves(response: httpx.Response) -> bool:
    return response.status_code == 200 and "process_resident_memory_bytes" in response.text


def test_tls_serves_a_verifying_scraper_and_refuses_plain_http(pki: Pki, web: Serve) -> None:
    url = web(tls(pki))
    assert serves(get(url, pki.client_context()))
    with pytest.raises(httpx.TransportError):  # plain HTTP to the TLS listener
        get(url.replace("https:", "http:"))
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        get(url, pki.client_context(trust=pki.other))  # the scraper checks who answers


def test_a_required_client_certificate_must_be_the_cas(pki: Pki, web: Serve) -> None:
    url = web(tls(pki, f"  client_auth_type: RequireAndVerifyClientCert\n"
                       f"  client_ca_file: {pki.ca.cert}\n"))  # fmt: skip
    assert serves(get(url, pki.client_context(cert=pki.client)))
    with pytest.raises(httpx.TransportError):
        get(url, pki.client_context())  # none
    with pytest.raises(httpx.TransportError):
        get(url, pki.client_context(cert=pki.stranger))  # another CA's


def test_a_client_certificate_if_given_must_be_the_cas(pki: Pki, web: Serve) -> None:
    url = web(tls(pki, f"  client_auth_type: VerifyClientCertIfGiven\n"
                       f"  client_ca_file: {pki.ca.cert}\n"))  # fmt: skip
    assert serves(get(url, pki.client_context()))
    assert serves(get(url, pki.client_context(cert=pki.client)))
    with pytest.raises(httpx.TransportError):
        get(url, pki.client_context(cert=pki.stranger))


def test_client_allowed_sans(pki: Pki, web: Serve) -> None:
    policy = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca.cert}\n"
    spiffe = "spiffe://cluster.local/ns/monitoring/sa/prometheus"
    url = web(tls(pki, policy + f"  client_allowed_sans: [one, '{spiffe}']\n"))
    assert serves(get(url, pki.client_context(cert=pki.client)))
    url = web(tls(pki, policy + "  client_allowed_sans: [bad]\n"))
    with pytest.raises(httpx.TransportError):
        get(url, pki.client_context(cert=pki.client))


def test_min_version_tls13_refuses_a_tls12_client(pki: Pki, web: Serve) -> None:
    url = web(tls(pki, "  min_version: TLS13\n"))
    old = pki.client_context()
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(httpx.ConnectError):
        get(url, old)
    assert serves(get(url, pki.client_context()))


def users(**passwords: str) -> str:
    lines = "".join(
        f"  {user}: {bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4)).decode()}\n"
        for user, pw in passwords.items()
    )
    return f"basic_auth_users:\n{lines}"


def test_basic_auth_serves_the_right_password_only(pki: Pki, web: Serve) -> None:
    url = web(tls(pki) + users(prometheus="s3cret"))
    ctx = pki.client_context()
    assert serves(get(url, ctx, auth=("prometheus", "s3cret")))
    refused = [
        get(url, ctx, auth=("prometheus", "wrong")),
        get(url, ctx, auth=("nobody", "s3cret")),  # unknown user: the same answer
        get(url, ctx),
        get(url, ctx, headers={"Authorization": "Basic !!notbase64"}),
        get(url, ctx, auth=("prometheus", "s3cret" * 20)),  # past bcrypt's 72 bytes
    ]
    for response in refused:
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Basic"
        assert response.text == "Unauthorized\n"


def test_the_toolkits_users_file_over_plain_http(web: Serve) -> None:
    """web_config_users_noTLS.good.yml and its passwords (handler_test.go): $2y$ hashes."""
    url = web((DATA / "web_config_users_noTLS.good.yml").read_text())
    assert serves(get(url, auth=("dave", "dave123")))
    assert serves(get(url, auth=("carol", "carol123")))
    assert get(url, auth=("dave", "bad")).status_code == 401
    assert get(url).status_code == 401
    # The toolkit's enumeration guard is no password: its fake hash's password is refused.
    assert get(url, auth=("fakeuser", "fakepassword")).status_code == 401


def test_a_scrape_costs_one_bcrypt_per_password_not_one_per_scrape(web: Serve) -> None:
    """Cost 12 takes a quarter of a second of CPU or so: 40 uncached checks would take ten
    seconds of the daemon's CPU, the cached ones two checks' worth."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(12)).decode()
    url = web(f"basic_auth_users:\n  prometheus: {hashed}\n")
    one = time.process_time()
    bcrypt.checkpw(b"s3cret", hashed.encode())
    check = time.process_time() - one
    start = time.process_time()
    with httpx.Client(timeout=10) as client:
        for _ in range(20):
            assert client.get(url, auth=("prometheus", "s3cret")).status_code == 200
            assert client.get(url, auth=("prometheus", "guess")).status_code == 401
    spent = time.process_time() - start  # the server's threads are this process's
    assert spent < 2 * check + 1.0, f"{spent:.2f} s of CPU for 40 scrapes ({check:.2f} s a check)"


def test_rotated_certificates_and_new_users_apply_without_a_restart(
    pki: Pki, web: Serve, tmp_path: Path
) -> None:
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.server.cert, cert)
    shutil.copy(pki.server.key, key)
    url = web("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    assert serves(get(url, pki.client_context()))
    for source, target in ((pki.server_by_other.cert, cert), (pki.server_by_other.key, key)):
        shutil.copy(source, f"{target}.new")
        os.replace(f"{target}.new", target)  # as a renewal (or a Secret's ..data) swaps them
    assert serves(get(url, pki.client_context(trust=pki.other)))
    with pytest.raises(httpx.ConnectError):
        get(url, pki.client_context())
    web_yml = tmp_path / "web.yml"
    web_yml.write_text(web_yml.read_text() + users(late="comer"))
    assert get(url, pki.client_context(trust=pki.other)).status_code == 401
    assert serves(get(url, pki.client_context(trust=pki.other), auth=("late", "comer")))


def test_a_file_gone_bad_refuses_scrapes_and_says_so_once(
    pki: Pki, web: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = web(tls(pki))
    good = (tmp_path / "web.yml").read_text()
    (tmp_path / "web.yml").write_text(good + "  cert_filse: typo\n")
    with caplog.at_level(logging.ERROR, logger="agent.daemon.web"):
        for _ in range(3):
            with pytest.raises(httpx.TransportError):
                get(url, pki.client_context())
    lines = [r.getMessage() for r in caplog.records if r.name == "agent.daemon.web"]
    assert len(lines) == 1 and "tls_server_config.cert_filse: unknown key" in lines[0]
    (tmp_path / "web.yml").write_text(good)
    assert serves(get(url, pki.client_context()))


def test_headers_and_the_rate_limit(web: Serve) -> None:
    url = web((DATA / "web_config_headers.good.yml").read_text())
    response = get(url)
    assert serves(response)
    assert response.headers["X-Frame-Options"] == "deny"
    assert response.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    url = web("rate_limit:\n  interval: 1h\n  burst: 2\n")
    assert [get(url).status_code for _ in range(3)] == [200, 200, 429]
    url = web((DATA / "web_config_rate_limiter_one_second.yaml").read_text())
    assert get(url).status_code == 429  # burst 0: nothing passes, as in the toolkit


def test_an_empty_file_is_plain_open_http(web: Serve) -> None:
    assert serves(get(web("")))


def test_gpuwatch_metrics_listen_moves_the_listener(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'[daemon]\nmetrics_listen = "127.0.0.1:{free_port()}"\n')
    port = free_port()
    config = load_config(str(path), {"GPUWATCH_METRICS_LISTEN": f"127.0.0.1:{port}"})
    server = MetricsServer.of(config.daemon, LatestRoundCollector())
    server.start()
    try:
        assert serves(get(f"http://127.0.0.1:{port}/metrics"))
        again = MetricsServer.of(config.daemon, LatestRoundCollector())
        with pytest.raises(ListenError) as taken:
            again.start()
        assert str(taken.value) == (
            f"GPUWATCH_METRICS_LISTEN = '127.0.0.1:{port}': cannot listen there: "
            "Address already in use"
        )
    finally:
        server.stop()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_an_ipv6_address_in_brackets(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text(tls(pki))
    server = MetricsServer(
        f"[::1]:{free_port()}", LatestRoundCollector(), str(tmp_path / "web.yml")
    )
    server.start()
    try:
        assert serves(get(f"https://[::1]:{server.port}/metrics", pki.client_context()))
    finally:
        server.stop()


def test_the_toolkits_config_reloading_case(pki: Pki, web: Serve, tmp_path: Path) -> None:
    """TestConfigReloading: a file that requires a client certificate (none given) is swapped
    for one that does not, under the running server: the next connection is accepted. (The
    toolkit's files, on this test's certificates: Python's client refuses the purpose of the
    toolkit's CA chain.)"""
    shutil.copy(pki.server.cert, tmp_path / "server.crt")
    shutil.copy(pki.server.key, tmp_path / "server.key")
    url = web((DATA / "web_config_noAuth.good.blocking.yml").read_text())
    with pytest.raises(httpx.TransportError):
        get(url, pki.client_context())
    (tmp_path / "web.yml").write_text((DATA / "web_config_noAuth.good.yml").read_text())
    assert serves(get(url, pki.client_context()))


def negotiated(pki: Pki, url: str, ciphers: str) -> str:
    """The suite a TLS 1.2 scraper offering ``ciphers`` (OpenSSL's names, its order) gets."""
    ctx = pki.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    with httpx.Client(verify=ctx, timeout=5) as client, client.stream("GET", url) as response:
        tls = response.extensions["network_stream"].get_extra_info("ssl_object")
        return str(tls.cipher()[0])


def test_cipher_suites_by_gos_names_and_whose_order_wins(pki: Pki, web: Serve) -> None:
    """The toolkit's someCiphers cases, for this test's ECDSA certificate."""
    suites = "  cipher_suites:\n  - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n" \
             "  - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n  max_version: TLS12\n"  # fmt: skip
    both = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"  # the client's order
    url = web(tls(pki, suites))
    assert negotiated(pki, url, both) == "ECDHE-ECDSA-AES128-GCM-SHA256"  # the server's order
    with pytest.raises(httpx.ConnectError):
        negotiated(pki, url, "ECDHE-ECDSA-CHACHA20-POLY1305")  # none in common
    url = web(tls(pki, suites + "  prefer_server_cipher_suites: false\n"))
    assert negotiated(pki, url, both) == "ECDHE-ECDSA-AES256-GCM-SHA384"  # the client's order


def test_a_bare_connection_as_a_tcp_probe_makes_is_quietly_closed(
    pki: Pki, web: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    url = web(tls(pki, f"  client_auth_type: RequireAndVerifyClientCert\n"
                       f"  client_ca_file: {pki.ca.cert}\n") + users(p="s"))  # fmt: skip
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        ok = get(url, pki.client_context(cert=pki.client), auth=("p", "s"))
    assert serves(ok)
    assert not [r for r in caplog.records if r.name.startswith("agent.daemon")]
