"""Matcher regexes mean what they mean to Alertmanager and Prometheus: RE2, anchored. The plain
subset that runs on Python's engine is checked against RE2 itself, pattern by pattern."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import re2  # type: ignore[import-untyped]

from alerts.regex import RegexError, anchored
from alerts.silence import parse_matcher

PLAIN = ["Gpu.*|Vram.*", "5..", "box-(a|b)", "a*?b", "(foo|bar)+", "", "x|", "a.c", "GPU-.*-0"]
TEXTS = ["", "GpuHot", "VramHigh", "500", "5000", "box-a", "box-c", "aab", "foobar", "a\nc",
         "abc", "x", "GPU-1-0", "gpuhot", "a.c", "bar\n"]  # fmt: skip


@pytest.mark.parametrize("pattern", PLAIN)
def test_the_plain_subset_agrees_with_re2_on_every_text(pattern: str) -> None:
    oracle = re2.compile(f"^(?:{pattern})$")
    for text in TEXTS:
        assert anchored(pattern)(text) == (oracle.search(text) is not None), (pattern, text)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("((?i)PRO).*", "product", True),  # a flag inside a group: an error to Python
        ("((?i)PRO).*", "PROD", True),
        ("(?i)gpuhot", "GpuHot", True),
        ("\\d+", "\u0663", False),  # ASCII digits only, as in RE2 (Python: Unicode)
        ("\\d+", "42", True),
        ("[[:alpha:]]+", "abc", True),  # a POSIX class
        ("\\pL+", "\u00e9t\u00e9", True),
        ("bar$", "bar\n", False),  # RE2's $ is the end of the text only
        ("$*bar", "bar", True),  # accepted by RE2 (Python: "nothing to repeat")
        ("a{2,3}", "aaa", True),
    ],
)
def test_re2_semantics_where_python_differs(pattern: str, text: str, expected: bool) -> None:
    assert anchored(pattern)(text) is expected


@pytest.mark.parametrize("pattern", ["a(", "a**", "a*+", "[z-a]", "*a"])
def test_an_invalid_pattern_is_refused_with_its_text(pattern: str) -> None:
    with pytest.raises(RegexError, match="invalid regular expression"):
        anchored(pattern)
    with pytest.raises(ValueError, match="invalid regular expression"):
        parse_matcher(f'job=~"{pattern}"')


def test_the_builtin_rules_do_not_load_re2() -> None:
    # The daemon's own patterns are plain: RE2's 3 MB stay out of its memory until a user's
    # silence needs them.
    code = (
        "import sys\n"
        "from alerts.inhibit import DEFAULT_INHIBIT_RULES, inhibited_by\n"
        "inhibited_by({'alertname': 'GpuHot', 'host': 'a'},"
        " [{'alertname': 'CollectorDown', 'collector': 'nvml', 'host': 'a'}],"
        " DEFAULT_INHIBIT_RULES)\n"
        "print('re2' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert out.stdout.strip() == "False"
