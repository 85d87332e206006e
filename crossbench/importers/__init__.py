"""Importers: raw results other tools wrote, turned into crossbench run directories.

Each importer reads one tool's files and writes the layout ``crossbench analyze`` reads: a
``state.json`` (kind ``crossbench.import``) listing cells with their coordinates and
baseline, and per cell a run directory whose ``manifest.json`` says ``"imported": {...}``
(the tool, the source files, how times were derived) and whose ``requests.jsonl`` holds
records in crossbench's own format.

- ``llama_server_raw``: a folder of llama-server response bodies, named by a pattern;
- ``vllm_bench``: ``vllm bench serve --save-result`` JSON (with or without
  ``--save-detailed``);
- ``llama_bench``: ``llama-bench -o json``;
- ``llama_logs``: llama.cpp's timing lines (llama-server, llama-completion, llama-cli);
- ``table``: a study's own per-request JSON, JSON Lines or CSV, mapped by ``--map``
  (tests and benchmarks write studies of known figures with ``tests/standins/study.py``).

``records`` holds what they share: building records from known timings and writing the
directory. Nothing is dropped silently: files and tests that could not be converted are
listed in ``state.json`` (``not_imported``) with the reason.
"""
