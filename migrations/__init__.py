"""The database schema (``migrations.schema``, the single source of truth) and migrations.

Imports nothing else of gpuwatch, so the schema can be read and upgraded on its own.
"""
