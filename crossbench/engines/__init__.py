"""Engine adapters behind one lifecycle interface (:mod:`crossbench.engines.base`).

Each engine lives in its own subpackage and registers lazily in :mod:`.registry`; declarative
per-version profiles (flag names, metric names) live in the repository's top-level ``engines/``.
"""
