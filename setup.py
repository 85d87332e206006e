"""Build hook: wheels carry the top-level ``engines/``, ``zenodo/`` and ``matrices/`` folders
in ``crossbench/_data/`` (``crossbench.paths.data_root`` finds them there when the package is
installed outside its checkout). Everything else is in ``pyproject.toml``."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("engines", "zenodo", "matrices")


class BuildPyWithData(build_py):
    """``build_py`` that also copies the data folders into the built package."""

    def run(self) -> None:
        super().run()
        here = Path(__file__).resolve().parent
        for name in DATA_DIRS:
            dest = Path(self.build_lib) / "crossbench" / "_data" / name
            shutil.copytree(here / name, dest, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildPyWithData})
