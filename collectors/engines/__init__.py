"""Inference engines' /metrics, mapped to gpuwatch's canonical engine (and dcgm GPU) signals.

One module per engine, each with ``detect(exposition) -> bool`` and
``map_samples(exposition, context) -> list[Sample]``; :mod:`.registry` lists them in detection
order and detects which one a body is.
"""
