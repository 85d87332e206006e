"""Orchestration: one configuration over N trials (``crossbench run``), and matrices
(``crossbench matrix``): in this process, or lanes on the GPUs of a Ray cluster
(``ray_exec``)."""
