"""Developer tools of the llama.cpp adapter: they write the files the adapter and its tests read.

Run by hand (``python -m``) when a release or the adapter changes, never by a benchmark run;
nothing outside this folder imports them, except a command that exists to run one.

- :mod:`.profile_gen`: a ``engines/llama.cpp/bNNNNN.yaml`` profile from a llama.cpp source
  tree (``crossbench engines profile`` runs it for a pin).
"""
