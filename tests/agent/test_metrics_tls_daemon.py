"""`gpuwatch run` as a DaemonSet runs it: listening where $GPUWATCH_METRICS_LISTEN says, /metrics
behind TLS and basic auth from the web config file; a reload that drops the file serves plain
HTTP again. The real process, scraped with httpx."""

from __future__ import annotations

import signal
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.agent.daemon_harness import free_port, start_daemon
from tests.agent.web_pki import Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


def test_the_daemon_serves_tls_and_basic_auth_where_the_environment_says(
    tmp_path: Path, pki: Pki
) -> None:
    hashed = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {pki.server.cert}\n  key_file: {pki.server.key}\n"
        f"basic_auth_users:\n  prometheus: {hashed}\n"
    )
    config = tmp_path / "gpuwatch.toml"
    body = (
        f'host = "test-box"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        f'[daemon]\ninterval_seconds = 1\nmetrics_listen = "127.0.0.1:{free_port()}"\n'
        "[collectors.nvml]\nenabled = false\n"
    )
    config.write_text(body.replace("[collectors", 'web_config_file = "web.yml"\n[collectors'))
    port = free_port()
    daemon = start_daemon(config, tmp_path, port, {"GPUWATCH_METRICS_LISTEN": f"127.0.0.1:{port}"})
    try:
        daemon.wait_for_notify("READY=1")
        url = f"https://127.0.0.1:{port}/metrics"
        ok = httpx.get(url, verify=pki.client_context(), auth=("prometheus", "scrape-me"))
        assert ok.status_code == 200 and "gpuwatch_" in ok.text
        wrong = httpx.get(url, verify=pki.client_context(), auth=("prometheus", "guess"))
        assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Basic"
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert f"serving /metrics on https://127.0.0.1:{port}/metrics" in daemon.log()
        # The reload drops the web config: the same address, plain and open again.
        config.write_text(body)
        daemon.signal(signal.SIGHUP)
        daemon.wait_for_notify("RELOADING=1")
        daemon.wait_for_notify("READY=1")
        assert "gpuwatch_" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert hashed not in daemon.log() and hashed[7:] not in daemon.log()
        code, _ = daemon.stop()
        assert code == 0
    finally:
        daemon.kill()
