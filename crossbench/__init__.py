"""crossbench: measure speculative decoding across inference engines.

Subpackages show the architecture:

- ``engines``  -- engine adapters behind one small lifecycle interface, and the build of engines;
- ``load``     -- the streaming OpenAI-compatible client, workloads and the stand-in server;
- ``analysis`` -- statistics computed from raw records (acceptance, paired speedups, sweeps);
- ``importers`` -- other tools' raw data into crossbench's record format;
- ``confounds`` -- provenance, normalized setups, classified diffs, known-interaction rules;
- ``telemetry`` -- NVML readings: thermal gate, sampler, derived GPU figures, checks;
- ``report``   -- HTML/Markdown reports, plots and PR datapoints;
- ``archive``  -- deterministic archives, their verification, the Zenodo deposit;
- ``store``    -- run directories on disk, written atomically;
- ``fixtures`` -- small deterministic GGUF models made by the project for tests;
- ``runner``   -- orchestration of one configuration over N trials, and of matrices;
- ``frames``   -- a run as pandas DataFrames and its exports (``crossbench.open_run``);
- ``cli``      -- the ``crossbench`` command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crossbench.frames import RunFrames

__version__ = "0.1.0"


def open_run(path: Any, opts: Any = None) -> RunFrames:
    """A run directory or archive as pandas DataFrames (:func:`crossbench.frames.open_run`;
    pandas is imported only when this is called)."""
    from crossbench.frames import open_run as _open_run

    return _open_run(path, opts)
