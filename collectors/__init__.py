"""Collectors turn the outside world (NVML, engine /metrics, billing APIs) into typed samples.

They know nothing of the database, cost or alerts, and import nothing else of gpuwatch.
"""
