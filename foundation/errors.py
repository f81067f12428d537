"""The root of gpuwatch's own exceptions.

Every package raises subclasses of :class:`GpuwatchError` for failures it can name (a bad
setting, a collector that could not read, a database out of reach), so the CLI can tell a
failure it should explain in one line from a bug that deserves its traceback.
"""

from __future__ import annotations


class GpuwatchError(Exception):
    """Root of gpuwatch's own exceptions."""
