"""The storage room: the database, the store of raw samples, rollups and retention, and the
restart-safe series arithmetic over stored samples.

Imports config and collect; knows no prices, alerts or reports.
"""
