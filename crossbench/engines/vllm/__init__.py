"""The vLLM adapter: ``vllm serve`` behind crossbench's engine lifecycle.

- :mod:`.config`: the strict typed config (server settings and the speculative method);
- :mod:`.profile`: per-version profiles (``engines/vllm/*.yaml``): which ``vllm serve`` flags,
  speculative-config fields and methods a release has, its metrics and startup-log formats;
- :mod:`.profile_gen`: regenerates a profile from a vLLM wheel (read, never installed);
- :mod:`.server`: :class:`~.server.VllmServer`, argv building, process-tree lifecycle;
- :mod:`.metrics`: vLLM's Prometheus families (rendering, prefix-cache/preemption deltas);
- :mod:`.startup_log`: facts read from the startup log (version, model runner, KV cache...);
- :mod:`.standin`: a **stand-in** ``vllm serve`` for tests on CPU (never a vLLM result);
- :mod:`.golden`: regenerates the golden argv files and the format fixtures of the tests.

See docs/vllm.md.
"""
