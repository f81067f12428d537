"""The alerting room: the inputs the rules read, the conditions, the evaluation and delivery of
one scope's alerts, the alert store, and the budget rules.

The pure lifecycle, dedup, silences and notifiers live in the top-level ``alerts`` package.
Imports config, collect, storage and cost.
"""
