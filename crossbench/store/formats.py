"""Former home of the run directory's kinds, format versions and ``--out`` checks, now owned by
:mod:`crossbench.store.rundir`; these names are re-exported so that imports of this module keep
working. New code imports from ``crossbench.store.rundir``."""

from __future__ import annotations

from crossbench.store.rundir import (
    DAMAGED,
    IMPORT_KIND,
    IMPORT_SCHEMA,
    MANIFEST_SCHEMA,
    MATRIX_KIND,
    RUN_KIND,
    STATE_KEYS,
    STATE_SCHEMA,
    STOPS,
    UPGRADE,
    check_new_out,
    check_state,
    check_version,
    kind_words,
    make_out_dir,
    read_json_object,
    read_stops,
)

STOPS_FILE = STOPS
"""Former name of :data:`crossbench.store.rundir.STOPS`."""

__all__ = ["DAMAGED", "IMPORT_KIND", "IMPORT_SCHEMA", "MANIFEST_SCHEMA", "MATRIX_KIND",
           "RUN_KIND", "STATE_KEYS", "STATE_SCHEMA", "STOPS_FILE", "UPGRADE", "check_new_out",
           "check_state", "check_version", "kind_words", "make_out_dir", "read_json_object",
           "read_stops"]
