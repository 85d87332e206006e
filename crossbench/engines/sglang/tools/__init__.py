"""Developer tools of the SGLang adapter: they write the files the adapter and its tests read.

Run by hand (``python -m``) when a release or the adapter changes, never by a benchmark run;
nothing outside this folder imports them, except a command that exists to run one.

- :mod:`.profile_gen`: an ``engines/sglang/X.Y.Z.yaml`` profile from an sglang wheel (read
  with ``ast``, never installed).
"""
