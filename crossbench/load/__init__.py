"""Load generation: what is sent, how it is sent, and a stand-in to check the timing.

- :mod:`~crossbench.load.workloads` -- prompt sets named by a spec (``builtin:mixed``,
  ``random:<N>``, ...) and pinned by a digest; the built-in prompts ship in ``prompts/``;
- :mod:`~crossbench.load.client` -- the streaming OpenAI-compatible client: closed-loop
  concurrency or Poisson arrivals, one raw record per request handed to a sink;
- :mod:`~crossbench.load.standin` -- a stand-in streaming server (not an engine) with known
  chunk timing, which logs the true send time of every chunk;
- :mod:`~crossbench.load.fidelity` -- comparisons of records against that truth, and of the
  client's decode rate against a server's own timings.
"""
