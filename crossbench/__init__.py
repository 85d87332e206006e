"""crossbench: measure speculative decoding across inference engines.

One subpackage per concept (engines, load, analysis, importers, confounds, telemetry, report,
archive, store, fixtures, runner, frames, cli); docs/development.md, "Layout", says what each
holds and which may import which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crossbench.frames import RunFrames

__version__ = "0.1.0"


def open_run(path: Any, opts: Any = None) -> RunFrames:
    """A run directory or archive as pandas DataFrames (:func:`crossbench.frames.open_run`;
    pandas is imported only when this is called)."""
    from crossbench.frames import open_run as _open_run

    return _open_run(path, opts)
