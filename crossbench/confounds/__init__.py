"""Confounds: everything besides the intended variable that can differ between two trials.

``provenance`` collects a trial's full setup when it runs (secrets redacted), ``normalize``
flattens it to a ``{dotted.field: value}`` view, ``diff`` classifies each difference of two
views (``intended``, ``confounding`` or ``benign``) and ``rules`` names known harmful
interactions, each with an action and a source. See docs/confounds.md.
"""
