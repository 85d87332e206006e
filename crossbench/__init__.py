"""crossbench: measure speculative decoding across inference engines.

Subpackages show the architecture:

- ``engines``  -- engine adapters behind one small lifecycle interface, and the build of engines;
- ``load``     -- the streaming OpenAI-compatible client, workloads and the stand-in server;
- ``analysis`` -- statistics computed from raw records (acceptance, latency, throughput);
- ``store``    -- run directories on disk, written atomically;
- ``fixtures`` -- small deterministic GGUF models made by the project for tests;
- ``runner``   -- orchestration of one configuration over N trials;
- ``cli``      -- the ``crossbench`` command.
"""

__version__ = "0.1.0"
