"""The /metrics web config file, checked offline: Prometheus exporter-toolkit's own valid and
invalid files (tests/agent/data/web_config, its TestYAMLFiles table) read by gpuwatch, and the
problems `gpuwatch check-config` lists with their key paths."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from agent.config.settings import ConfigError, load_config
from agent.config.web import WebConfigError, read_web_config
from tests.agent.console import environment, gpuwatch

DATA = Path(__file__).parent / "data" / "web_config"

# The toolkit's TestYAMLFiles cases: file -> the words its error must contain.
TOOLKIT_BAD = {
    "web_config_junk.yml": "YAML error",
    "web_config_junk_key.yml": "tls_server_config.cert_filse: unknown key",
    "web_config_noAuth_certPath_empty.bad.yml": "missing one of cert or cert_file",
    "web_config_noAuth_cert_empty.bad.yml": "missing one of cert or cert_file",
    "web_config_noAuth_keyPath_empty.bad.yml": "missing one of key or key_file",
    "web_config_noAuth_key_empty.bad.yml": "missing one of key or key_file",
    "web_config_noAuth_certPath_keyPath_empty.bad.yml": "missing one of cert or cert_file",
    "web_config_noAuth_certPath_invalid.bad.yml": "No such file",
    "web_config_noAuth_keyPath_invalid.bad.yml": "No such file",
    "web_config_noAuth_certPath_keyPath_invalid.bad.yml": "No such file",
    "web_config_noAuth.bad.yml": "client CA's have been configured without a Client Auth Policy",
    "web_config_auth_clientCAs_invalid.bad.yml": "No such file",
    "web_config_auth_user_list_invalid.bad.yml": "hashedSecret too short",
    "web_config_noAuth_inventedCiphers.bad.yml": "unknown cipher",
    "web_config_noAuth_inventedCurves.bad.yml": "unknown curve",
    "web_config_noAuth_wrongTLSVersion.bad.yml": "unknown TLS version",
    # From its TestServerBehaviour: refused when the server starts, so at check-config here.
    "web_config_headers_content_type_options.bad.yml": "invalid value for X-Content-Type",
    "web_config_headers_frame_options.bad.yml": "invalid value for X-Frame-Options",
    "web_config_headers_extra_header.bad.yml": "HTTP header 'Content-Type' can not be configured",
}
TOOLKIT_GOOD = [
    "web_config_empty.yml",
    "web_config_noAuth.good.yml",
    "web_config_noAuth.good.blocking.yml",
    "web_config_noAuth_tlsInline.good.yml",
    "web_config_noAuth_allCiphers.good.yml",
    "web_config_noAuth_someCiphers.good.yml",
    "web_config_noAuth_someCiphers_noOrder.good.yml",
    "web_config_noAuth_someCurves.good.yml",
    "web_config_noAuth_noHTTP2.good.yml",
    "tls_config_noAuth.requireandverifyclientcert.good.yml",
    "web_config_auth_client_san.good.yaml",
    "web_config_auth_client_san.bad.yaml",  # valid: its client is what fails the handshake
    "web_config_users.good.yml",
    "web_config_users_noTLS.good.yml",
    "web_config_headers.good.yml",
    "web_config_rate_limiter_nonblocking.yaml",
    "web_config_rate_limiter_one_second.yaml",
    # In none of the toolkit's tables: no client CA means the system's roots, there and here.
    "web_config_auth_clientCAs_missing.bad.yml",
    # Go's HTTP/2 needs a cipher this file leaves out; gpuwatch speaks HTTP/1.1 only.
    "web_config_noAuth_noHTTP2Cipher.bad.yml",
]
# Valid for the toolkit, refused here with the reason (docs/metrics-security.md).
DIFFERENT = {
    "tls_config_noAuth.requireanyclientcert.good.yml": "Python's ssl cannot do",
    "tls_config_noAuth.requireanyclientcertkeyinline.good.yml": "Python's ssl cannot do",
    "web_config_noAuth_allCurves.good.yml": "one curve, not a list",
}


def problems(name: str) -> str:
    with pytest.raises(WebConfigError) as caught:
        read_web_config(DATA / name)
    return "\n".join(caught.value.problems)


@pytest.mark.parametrize("name", sorted(TOOLKIT_BAD))
def test_the_toolkits_invalid_files_are_refused_for_its_reason(name: str) -> None:
    assert TOOLKIT_BAD[name] in problems(name)


@pytest.mark.parametrize("name", TOOLKIT_GOOD)
def test_the_toolkits_valid_files_load(name: str) -> None:
    assert read_web_config(DATA / name).source == str(DATA / name)


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_what_pythons_ssl_cannot_do_is_an_error_not_ignored(name: str) -> None:
    assert DIFFERENT[name] in problems(name)


def test_every_toolkit_file_is_covered() -> None:
    files = {p.name for p in DATA.iterdir() if p.suffix in (".yml", ".yaml")}
    assert files == set(TOOLKIT_BAD) | set(TOOLKIT_GOOD) | set(DIFFERENT)


def test_an_empty_file_serves_plain_http_without_users() -> None:
    config = read_web_config(DATA / "web_config_empty.yml")
    assert (config.tls, dict(config.users), config.headers) == (None, {}, ())


def test_the_toolkits_settings_arrive_as_meant() -> None:
    some = read_web_config(DATA / "web_config_noAuth_someCiphers.good.yml").tls
    assert some is not None
    assert some.ciphers == ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384")
    assert some.min_version == some.max_version == ssl.TLSVersion.TLSv1_2
    assert some.cert_file == DATA / "server.crt"  # relative to the web config file
    users = read_web_config(DATA / "web_config_users.good.yml").users
    assert sorted(users) == ["alice", "bob", "carol", "dave"]
    headers = dict(read_web_config(DATA / "web_config_headers.good.yml").headers)
    assert headers["X-XSS-Protection"] == "1"  # a YAML integer, as Go reads it into a string


def test_a_missing_file_and_a_duplicate_key_are_errors(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read: No such file"):
        read_web_config(tmp_path / "web.yml")
    twice = tmp_path / "twice.yml"
    twice.write_text("basic_auth_users: {}\nbasic_auth_users: {}\n")
    with pytest.raises(WebConfigError, match="duplicate key 'basic_auth_users'"):
        read_web_config(twice)


def test_problems_never_show_a_hash_or_the_key(tmp_path: Path) -> None:
    shutil.copy(DATA / "server.crt", tmp_path / "server.crt")
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n  cert_file: server.crt\n  key: |\n    -----BEGIN PRIVATE KEY-----\n"
        "    c2VjcmV0LWtleS1ieXRlcw==\n    -----END PRIVATE KEY-----\n"
        "basic_auth_users:\n  eve: $2y$10$tooshortbutsecret\n"
    )
    text = problems_at(tmp_path / "web.yml")
    assert "basic_auth_users.eve: not a bcrypt hash" in text
    assert "failed to load the certificate and its key" in text
    assert "tooshortbutsecret" not in text and "c2VjcmV0" not in text


def problems_at(path: Path) -> str:
    with pytest.raises(WebConfigError) as caught:
        read_web_config(path)
    return "\n".join(caught.value.problems)


def test_check_config_lists_the_web_configs_problems_with_key_paths(tmp_path: Path) -> None:
    shutil.copy(DATA / "web_config_junk_key.yml", tmp_path / "web.yml")
    path = tmp_path / "gpuwatch.toml"
    path.write_text('[daemon]\nweb_config_file = "web.yml"\n')
    done = gpuwatch(["check-config", "--config", str(path)], environment(tmp_path))
    assert done.returncode != 0
    assert (
        f"daemon.web_config_file: {tmp_path / 'web.yml'}: tls_server_config.cert_filse: "
        "unknown key" in done.stdout + done.stderr
    )


def test_gpuwatch_metrics_listen_wins_over_the_file_and_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text('[daemon]\nmetrics_listen = "127.0.0.1:9877"\n')
    env = {"GPUWATCH_METRICS_LISTEN": "10.1.2.3:9877"}
    daemon = load_config(str(path), env).daemon
    assert (daemon.metrics_listen, daemon.metrics_listen_key) == ("10.1.2.3:9877", env.popitem()[0])
    assert load_config(str(path), {"GPUWATCH_METRICS_LISTEN": ""}).daemon.metrics_listen == (
        "127.0.0.1:9877"  # empty is unset, as $GPUWATCH_DATABASE_URL
    )
    assert load_config(str(path), {"GPUWATCH_METRICS_LISTEN": "[::1]:9877"}).daemon.metrics_listen
    with pytest.raises(ConfigError, match="GPUWATCH_METRICS_LISTEN: expected HOST:PORT"):
        load_config(str(path), {"GPUWATCH_METRICS_LISTEN": "10.1.2.3"})


def test_a_yaml_error_says_where_without_quoting_the_line(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text("basic_auth_users:\n  john: $2y$10$secrethash: [\n")
    text = problems_at(tmp_path / "web.yml")
    assert text == "YAML error: mapping values are not allowed here (line 2, column 26)"


def test_a_hostile_key_is_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text('basic_auth_users:\n  "\\e[31mroot": nothash\n')
    assert problems_at(tmp_path / "web.yml").startswith("basic_auth_users.\\x1b[31mroot: not a")


def test_an_unexpanded_kubernetes_variable_is_named(tmp_path: Path) -> None:
    env = {"GPUWATCH_METRICS_LISTEN": "$(POD_IP):9877"}
    with pytest.raises(ConfigError, match=r"holds an unexpanded variable: define it \(POD_IP"):
        load_config(None, env)
