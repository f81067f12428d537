"""The HTML report in a real headless Chromium: no console errors (with a canary proving that
errors would be seen) and a screenshot that is not blank."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from agent.reporting.model import Report
from agent.reporting.render.dispatch import render
from tests.agent.report_sample import make_report

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts"


@pytest.fixture(scope="module")
def report() -> Report:
    return make_report()


# -- a real browser --------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (`make test` installs it when run as root)",
)
# With --enable-logging=stderr, Chromium logs each console message of the page as
# "...:INFO:CONSOLE:<line>] "<message>", source: <url> (<line>)" (older builds: "CONSOLE(<line>)"):
# SVG attribute errors, CSP refusals, script errors and console.error alike.
CONSOLE = re.compile(r":CONSOLE[:(]")


def headless(page: Path, screenshot: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--no-first-run", "--disable-extensions", "--disable-background-networking",
         f"--screenshot={screenshot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def png_facts(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed (filtered) image data of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            chunks.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@needs_chromium
def test_chromium_console_capture_sees_errors(tmp_path: Path) -> None:
    """The canary for the test below: a page with the mistakes this renderer could make (a bad
    SVG attribute, a request the CSP refuses) must produce console lines, or 'no console
    errors' would prove nothing."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        '<title>broken</title></head><body><svg><rect width="-5" height="NaN"/></svg>'
        '<img src="https://example.invalid/x.png" alt=""></body></html>',
        encoding="utf-8",
    )
    result = headless(broken, tmp_path / "broken.png", tmp_path / "profile")
    lines = console_lines(result.stderr)
    assert any("<rect> attribute width" in line for line in lines), result.stderr[-3000:]
    assert any("Content Security Policy" in line for line in lines), result.stderr[-3000:]


@needs_chromium
def test_html_report_renders_in_headless_chromium_without_console_errors(
    report: Report, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    screenshot = ARTIFACTS / "report.png"
    screenshot.unlink(missing_ok=True)
    result = headless(page, screenshot, tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-3000:]
    assert console_lines(result.stderr) == []
    width, height, pixels = png_facts(screenshot.read_bytes())
    assert (width, height) == (1280, 2400)
    # A blank page of this size is a 14 KB PNG whose filtered rows are zero bytes but for the
    # filter byte (~2,400 non-zero bytes); this report's is ~250 KB with ~240,000.
    assert screenshot.stat().st_size > 100_000
    assert sum(1 for b in pixels if b) > 20 * height
