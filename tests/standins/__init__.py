"""Stand-ins: test doubles that imitate an engine, a service or a driver, kept out of the package.

A stand-in answers the way the real thing does (same endpoints, metric names, log lines and
function names) with values a test sets, so the harness can be tested where the real thing
cannot run: on a CPU without vLLM or SGLang, offline without Zenodo, without an NVIDIA GPU.
Its output is never a measurement, and every stand-in names itself as one in what it serves:
``crossbench-standin`` as model and fingerprint (the streaming server), ``+crossbench.standin``
in the version string (the vLLM and SGLang stand-ins; the adapters record ``standin: true``),
DOIs under the test prefix 10.5072 and ``(not Zenodo)`` when it starts (the Zenodo stand-in).
The scripted NVML is the exception that proves it: it lives in a test's own process and is read
only where a test passes it as the NVML provider, so no run directory ever records it.

- :mod:`.load`: an OpenAI-compatible streaming server (not an engine; llama-server-like
  ``timings``) with known chunk timing, which logs the true send time of every chunk;
- :mod:`.vllm`: ``vllm serve`` on CPU (routes, ``vllm:*`` metrics, start-up log, launcher);
- :mod:`.sglang`: ``python -m sglang.launch_server`` on CPU (routes, ``sglang:*`` metrics,
  launcher);
- :mod:`.zenodo`: the Zenodo deposit REST API on loopback;
- :mod:`.nvml`: a ``pynvml``-shaped NVML whose GPUs report what a test scripts.

They live in the checkout's ``tests/`` folder, not in the installed package, and
``tests/test_standins_apart.py`` checks that no product module imports them. Tests (pytest puts
``tests/`` on ``sys.path``, and ``tests/conftest.py`` on ``PYTHONPATH`` for child processes)
and benchmarks import them; a user starts one from a checkout with its ``python -m`` entry
point (``PYTHONPATH=tests python -m standins.load``, ``... -m standins.vllm launcher PATH``,
``... -m standins.sglang launcher PATH``, ``... -m standins.zenodo``) and points crossbench at
it like at the real thing (the launcher as ``binary:``, the Zenodo stand-in's URL as
``--base-url``).
"""

import os
import shlex
from pathlib import Path

HOME = Path(__file__).resolve().parent.parent
"""The folder that holds this package (``tests/``): on ``sys.path``, ``import standins`` works."""


def launcher_export() -> str:
    """The launcher scripts' ``export PYTHONPATH=...`` line: :data:`HOME` and the checkout,
    then whatever ``PYTHONPATH`` the script finds when it runs."""
    here = shlex.quote(f"{HOME}:{HOME.parent}")
    return f"export PYTHONPATH={here}${{PYTHONPATH:+:$PYTHONPATH}}\n"


def pythonpath() -> str:
    """``PYTHONPATH`` for a child process that runs a stand-in: :data:`HOME` and the checkout
    (for ``crossbench`` when it is not installed), then the caller's own."""
    own = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(HOME), str(HOME.parent), *([own] if own else [])])

