"""Reports of a finished study, what its author publishes: ``study`` reads a run directory once
for every output; ``card`` (the study card), ``plots`` (figures, byte-for-byte reproducible),
``html`` (the self-contained report and its Markdown twin) and ``datapoint`` (the block for an
upstream pull request) render it; ``build`` (``crossbench report``) writes them into one folder.
"""
