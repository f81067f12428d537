"""A fake libnvidia-ml.so.1 (fakenvml.c), so that the real pynvml runs without a GPU.

The tests load it under the NVML collector (tests/fakenvml), and ``gpuwatch demo`` builds it
into its state folder to simulate its fleet's GPUs. :mod:`.hardware` writes the file the
library reads its "hardware" from; :mod:`.build` compiles it.
"""
