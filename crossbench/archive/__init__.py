"""Archives of finished studies that anyone can verify, re-analyse and cite.

- ``build``    -- ``crossbench archive RUN_DIR --out DIR``: the folder and its deterministic
  zip (raw records, logs, telemetry, metrics, manifests, analysis, report, metadata);
- ``metadata`` -- creators, licences, related identifiers, and the metadata files rendered
  from the templates in the repository's ``zenodo/`` folder;
- ``secrets``  -- secret-looking values that must never be archived;
- ``verify``   -- ``crossbench archive verify``: checksums, schema versions, re-derivation of
  every number, secrets;
- ``zenodo``   -- ``crossbench archive upload``: the Zenodo deposit REST client.

A local stand-in for that API (not Zenodo), for tests and dry runs, is
``tests/standins/zenodo.py``.
"""
