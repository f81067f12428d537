"""An inference-engine simulator for tests and demos: known traffic, exact /metrics text.

- :class:`Traffic` (traffic.py): a deterministic request cycle whose truth can be queried;
- :func:`render` (render.py): the /metrics text of vLLM 0.6/0.8.5/0.10/0.33, SGLang 0.5,
  TGI 3, llama.cpp and dcgm-exporter for that traffic, as each prints it
  (/work/shared/reference/engine-metrics.md);
- :class:`EngineServer` (server.py): that text over real HTTP, with fault modes.

Imports nothing from the rest of gpuwatch.
"""
