"""The reporting room: report periods, the report model, the figures and recommendations it is
built from, its renderers, and the weekly digest.

Imports every room before it (config to alerting); nothing but the daemon and the CLI imports it.
"""
