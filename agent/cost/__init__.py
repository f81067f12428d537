"""The cost room: the rate card, the GPU cost ledger and its metering, target allocation, cost
summaries, billing records and reconciliation, budget and forecast figures, break-even, and
the cost signals for /metrics.

Imports config, collect and storage.
"""
