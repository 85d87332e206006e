"""Load generation: what is sent, how it is sent, and how its timing is checked.

- :mod:`~crossbench.load.workloads` -- prompt sets named by a spec (``builtin:mixed``,
  ``random:<N>``, ...) and pinned by a digest; the built-in prompts ship in ``prompts/``;
- :mod:`~crossbench.load.client` -- the streaming OpenAI-compatible client: closed-loop
  concurrency or Poisson arrivals, one raw record per request handed to a sink.

How faithful the client's timing is, against the true send times a stand-in server logs, is
checked outside the package (``tests/standins/fidelity.py``, ``benchmarks/client_fidelity.py``).
"""
