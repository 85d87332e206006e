"""Confounds: everything besides the intended variable that can differ between two trials.

- :mod:`.provenance`: the full effective setup of a trial, collected when it runs (harness
  and engine identity, argv, engine-relevant environment with secrets redacted, model files
  and their GGUF facts, host, GPUs through NVML); schema-versioned;
- :mod:`.normalize`: a flat ``{dotted.field: value}`` view of a trial's setup, from its run
  directory's manifest and its provenance record;
- :mod:`.diff`: two views compared field by field, each difference classified ``intended``
  (the comparison's axis), ``confounding`` (can change speed) or ``benign``;
- :mod:`.rules`: known harmful interactions (e.g. prefix caching with MTP on vLLM), each with
  its explanation, an action and a source.

See docs/confounds.md.
"""
