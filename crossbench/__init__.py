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
- ``cli``      -- the ``crossbench`` command.
"""

__version__ = "0.1.0"
