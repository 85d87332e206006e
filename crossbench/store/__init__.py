"""Results on disk: run directories, written so that a crash or a kill loses no finished result.

``rundir`` owns the run directory (every file name, the format versions and their history,
typed records, the writer and the reader); ``atomic`` holds the durable writes and the one
JSONL scanner under it. ``formats`` re-exports the names ``rundir`` took over.
"""
