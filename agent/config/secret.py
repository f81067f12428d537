"""A secret value that cannot leak through repr, str, logs or exception text by accident."""

from __future__ import annotations


class Secret:
    """Wraps a credential; only :meth:`reveal` gives the value back.

    ``source`` says where it came from (``env GPUWATCH_SLACK_WEBHOOK``, ``file /run/...``) so
    errors can point at it without showing it.
    """

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value = value
        self.source = source

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret(<secret> from {self.source})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
