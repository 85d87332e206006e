"""The vLLM adapter: ``vllm serve`` behind crossbench's engine lifecycle.

- :mod:`.config`: the strict typed config (server settings and the speculative method);
- :mod:`.profile`: per-version profiles (``engines/vllm/*.yaml``): which ``vllm serve`` flags,
  speculative-config fields and methods a release has, its metrics and startup-log formats;
- :mod:`.server`: :class:`~.server.VllmServer`, argv building, process-tree lifecycle;
- :mod:`.metrics`: vLLM's Prometheus families (rendering, prefix-cache/preemption deltas);
- :mod:`.startup_log`: facts read from the startup log (version, model runner, KV cache...);
- :mod:`.tools`: developer tools, not run by the adapter: :mod:`.tools.profile_gen`
  regenerates a profile from a vLLM wheel (read, never installed); the tests' golden argv
  files and format fixtures come from ``tests/vllm_golden.py``.

Its stand-in ``vllm serve`` (tests on CPU, never a vLLM result) is
``tests/standins/vllm.py``.

See docs/vllm.md.
"""
