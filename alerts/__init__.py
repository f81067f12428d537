"""Alerts: rules as data, the Prometheus-style lifecycle, Alertmanager-style notification
decisions (grouping, dedup, silences, inhibition) and the notifiers.

Pure decisions take ``now`` as an argument. ``alerts`` imports only types from ``collectors``.
"""
