"""Orchestration: one configuration over N trials (``crossbench run``)."""
