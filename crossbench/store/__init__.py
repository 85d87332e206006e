"""Results on disk: run directories, written so that a crash or a kill loses no finished result."""
