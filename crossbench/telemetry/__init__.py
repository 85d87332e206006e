"""GPU state measured, not assumed: NVML readings (``nvidia-ml-py``) for gates and traces.

Without an NVIDIA driver or GPU every reader says so (``available=False`` with the reason)
and everything else in crossbench still works.
"""
