"""Reports of a finished study: what its author publishes.

- ``study``     -- a run directory read once for every output (analysis, manifests, traces);
- ``card``      -- the study card: hardware, engines, models, workload, sampling, schedule and
  what was held fixed across every cell;
- ``plots``     -- matplotlib figures (PNG and SVG, byte-for-byte reproducible);
- ``html``      -- the self-contained HTML report and its Markdown twin;
- ``datapoint`` -- the compact Markdown block for an upstream pull request;
- ``build``     -- ``crossbench report``: all of the above into one folder.
"""
