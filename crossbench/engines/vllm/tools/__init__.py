"""Developer tools of the vLLM adapter: they write the files the adapter and its tests read.

Run by hand (``python -m``) when a release or the adapter changes, never by a benchmark run;
nothing outside this folder imports them, except a command that exists to run one.

- :mod:`.profile_gen`: an ``engines/vllm/X.Y.Z.yaml`` profile from a vLLM wheel (read with
  ``ast``, never installed). The tests' golden files come from ``tests/vllm_golden.py``.
"""
