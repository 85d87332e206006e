"""What the engine stand-ins' command lines share: their arguments (with
``CROSSBENCH_STANDIN_ARGS`` appended), ``--version``, ``launcher PATH`` and ``serve``
(:func:`standin_main`), and the stubborn worker of ``--standin-spawn-orphan``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

S = TypeVar("S")


def standin_args(argv: Sequence[str] | None) -> list[str]:
    """The command's arguments (``sys.argv`` without ``argv``), then the stand-in options of
    ``CROSSBENCH_STANDIN_ARGS``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return args + shlex.split(os.environ.get("CROSSBENCH_STANDIN_ARGS", ""))


def standin_main(argv: Sequence[str] | None, default_version: str, suffix: str,
                 write_launcher: Callable[..., Path], usage: str,
                 parse_settings: Callable[[Sequence[str]], S],
                 serve: Callable[[S], Coroutine[Any, Any, None]]) -> int:
    """A stand-in's command: ``--version``, ``launcher PATH [...]`` or ``serve [flags]``
    (until SIGTERM or Ctrl-C); anything else prints ``usage`` and returns 2."""
    args = standin_args(argv)
    if common_command(args, default_version, suffix, write_launcher):
        return 0
    if not args or args[0] != "serve":
        print(usage, file=sys.stderr)
        return 2
    settings = parse_settings(args[1:])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(settings))
    return 0


def common_command(args: list[str], default_version: str, suffix: str,
                   write_launcher: Callable[..., Path]) -> bool:
    """Answer ``--version`` (the posed release plus ``suffix``) or ``launcher PATH [...]``;
    returns whether ``args`` was one of them."""
    if args and args[0] == "--version":
        v = args[args.index("--standin-version") + 1] if "--standin-version" in args \
            else default_version
        print(v + suffix)
        return True
    if len(args) >= 2 and args[0] == "launcher":
        print(write_launcher(Path(args[1]), *args[2:]))
        return True
    return False


_ORPHAN_CODE = (
    "import os, signal, sys, time\n"
    "os.setpgid(0, 0)\n"  # leaves the server's process group, stays in its session
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n"
)


def spawn_orphan(pidfile: Path) -> None:
    """Start a worker that leaves the server's process group (staying in its session),
    ignores SIGTERM and writes its pid to ``pidfile``: what an engine's worker that outlives
    its server looks like to ``stop()``."""
    subprocess.Popen([sys.executable, "-c", _ORPHAN_CODE, str(pidfile)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
