"""`gpuwatch demo`: a simulated fleet's month through the real parts, then the live daemon.

- :mod:`.scenario`: the fleet (2 hosts, 6 GPUs, 3 models) and its month, deterministic;
- :mod:`.settings`: the demo's folder and the hosts' configurations (TOML, real loader);
- :mod:`.prepare`: a fresh demo database (marked, agent.storage.demo_mark), the fake NVML;
- :mod:`.hardware`: the fake libnvidia-ml.so.1 built and loaded, the hosts' GPUs written;
- :mod:`.engines`: the history's scrapes, the real collector's samples fast-forwarded;
- :mod:`.history`: the month through each host's App, store, alert rules and rollups;
- :mod:`.live`: the real daemon against the simulator's HTTP servers, until SIGTERM.
"""
