"""/metrics on an address already in use: at start, one line naming
``daemon.metrics_listen`` and exit 2, as the real process; on reload, the old listener stays
and the log says why."""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.daemon.service import Daemon
from tests.agent.console import environment, gpuwatch
from tests.agent.daemon_harness import free_port


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def config(path: Path, port: int) -> Path:
    path.write_text(
        f'host = "test-box"\ndatabase_url = "sqlite:///{path.parent / "gw.db"}"\n'
        f'[daemon]\ninterval_seconds = 10\nmetrics_listen = "127.0.0.1:{port}"\n'
        "[collectors.nvml]\nenabled = false\n"
    )
    return path


def test_a_port_in_use_at_start_is_one_line_and_exit_2(tmp_path: Path, taken: int) -> None:
    path = config(tmp_path / "gpuwatch.toml", taken)
    upgrade = gpuwatch(["db", "upgrade", "--config", str(path)], environment(tmp_path))
    assert upgrade.returncode == 0  # so that no migration speaks at start
    done = gpuwatch(["run", "--config", str(path)], environment(tmp_path))
    assert done.returncode == 2
    assert done.stderr == (
        f"gpuwatch: daemon.metrics_listen = '127.0.0.1:{taken}': cannot listen there: "
        "Address already in use\n"
    )


def test_a_reload_onto_a_port_in_use_keeps_the_old_listener(
    tmp_path: Path, taken: int, caplog: pytest.LogCaptureFixture
) -> None:
    first = free_port()
    path = config(tmp_path / "gpuwatch.toml", first)
    daemon = Daemon(str(path), load_config(str(path)))
    daemon.metrics.start()
    try:
        config(path, taken)
        with caplog.at_level(logging.ERROR):
            assert daemon.reload() is True  # the rest of the new config applies
        assert daemon.metrics.listen == f"127.0.0.1:{first}"
        with urllib.request.urlopen(f"http://127.0.0.1:{first}/metrics", timeout=5) as page:
            assert page.status == 200
        assert f"daemon.metrics_listen = '127.0.0.1:{taken}'" in caplog.text
        assert f"/metrics stays on 127.0.0.1:{first}" in caplog.text
        # Once the address is free, the next reload moves there.
        config(path, free_port())
        assert daemon.reload() is True
        assert daemon.metrics.listen != f"127.0.0.1:{first}"
    finally:
        daemon.metrics.stop()
        daemon.app.close()
