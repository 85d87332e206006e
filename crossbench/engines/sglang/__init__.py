"""The SGLang adapter: ``python -m sglang.launch_server`` behind crossbench's engine lifecycle.

- :mod:`.config`: the strict typed config (server settings and the speculative algorithm);
- :mod:`.profile`: per-release profiles (``engines/sglang/*.yaml``): flags, speculative
  algorithms, ``sglang:*`` metric families and routes of a release;
- :mod:`.metrics`: the metric names crossbench reads (its speculative counters);
- :mod:`.server`: :class:`~.server.SglangServer`, argv building and the process lifecycle;
- :mod:`.tools`: developer tools, not run by the adapter: :mod:`.tools.profile_gen`
  regenerates a profile from an sglang wheel (read, never installed).

Its stand-in SGLang server (tests on CPU, never an SGLang result) is
``tests/standins/sglang.py``.

Registered with one line in :mod:`crossbench.engines.registry`. See docs/sglang.md.
"""
