"""The real-GPU check (`make test-gpu`): gpuwatch's NVML figures side by side with nvidia-smi's,
and GPM's SM activity under a known load. Every test skips, saying why, on a box without a
real NVIDIA GPU; ``test_selftest.py`` runs the same comparison over the fake NVML in `make test`.
"""
