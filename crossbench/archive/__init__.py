"""Archives of finished studies that anyone can verify, re-analyse and cite: ``build``
(``crossbench archive``: the folder and its deterministic zip), ``verify`` (``archive verify``:
checksums, schema versions, re-derivation of every number, secrets), ``zenodo`` (``archive
upload``: the deposit REST client), ``metadata`` (creators, licences, the files rendered from
the ``zenodo/`` templates) and ``secrets`` (what must never be archived). A local stand-in for
Zenodo's API, for tests and dry runs, is ``tests/standins/zenodo.py``.
"""
