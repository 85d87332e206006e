"""The ``crossbench`` command line: data to stdout, progress to stderr.

Exit codes: 0 ok, 1 runtime failure (an engine died, a request failed), 2 usage error
(bad input, named with its fix).
"""
