"""The daemon room: the long-running process. Wiring from a Config, the tick and its schedule,
the fleet leader, sd_notify and the /metrics exposition.

Imports every room before it; only the CLI imports it.
"""
