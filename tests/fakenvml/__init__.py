"""The fake libnvidia-ml.so.1 (agent/sim/fakenvml/fakenvml.c) for running the real pynvml
without a GPU.

The helpers live in :mod:`tests.fakenvml.build` (kept out of this ``__init__`` so that
``python -m tests.fakenvml.build`` runs without importing itself twice).
"""
