"""The agent: config, storage, the scheduler, /metrics and the CLI; it wires everything together.

Nothing imports ``agent``.
"""

__version__ = "0.1.0"
