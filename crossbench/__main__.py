"""``python -m crossbench``: the same as the ``crossbench`` command."""

from crossbench.cli.main import main

main()
