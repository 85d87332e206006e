"""Importers: raw results other tools wrote, turned into run directories ``crossbench
analyze`` reads (the layout, and ``not_imported``, which lists what could not be converted:
docs/analysis.md, "Importing other tools' results").

- ``llama_server_raw``: a folder of llama-server response bodies, named by a pattern;
- ``vllm_bench``: ``vllm bench serve --save-result`` JSON (with or without
  ``--save-detailed``);
- ``llama_bench``: ``llama-bench -o json``;
- ``llama_logs``: llama.cpp's timing lines (llama-server, llama-completion, llama-cli);
- ``table``: a study's own per-request JSON, JSON Lines or CSV, mapped by ``--map``
  (tests and benchmarks write studies of known figures with ``tests/standins/study.py``).

``records`` holds what they share: records from known timings, the checks of source values,
the declared settings and the directory writer.
"""
