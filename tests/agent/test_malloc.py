"""glibc allocator tuning for the daemon (agent.daemon.malloc)."""

from __future__ import annotations

import platform

import pytest

from agent.daemon import malloc

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


@glibc_only
def test_arenas_are_limited_unless_the_environment_chose() -> None:
    assert malloc.limit_arenas() is True


@glibc_only
def test_an_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc.limit_arenas() is False


def test_trim_never_fails() -> None:
    assert isinstance(malloc.trim(), bool)
