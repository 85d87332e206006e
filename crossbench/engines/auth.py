"""Servers behind an API key: where crossbench finds the key, how it hands it to the server
and to its own requests, and what an HTTP 401 means (docs/engines.md "Servers behind an API
key"). The key never sits in a config, and reaches the server through the engine's own
environment variable, never its argv (:func:`key_to_environment`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from crossbench.errors import RunError, UserError
from crossbench.textfile import decode_text, read_bytes

KEY_FLAG = "--api-key"
"""The server flag that takes a key (llama-server and vLLM spell it alike)."""
UNAUTHORIZED = (401, 403)
"""HTTP statuses of a refused key (llama-server and vLLM answer 401)."""
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HOW = ("set api_key_env: NAME (an environment variable holding the key) or api_key_file: PATH "
        "in the engine config (crossbench run: --api-key-env NAME)")


class ApiKeySettings(BaseModel):
    """Where the key of a server behind an API key comes from (fields of an engine config)."""

    api_key_env: str | None = Field(
        None, pattern=_ENV_NAME, description="Name of an environment variable that holds the "
        "server's API key (never the key itself). crossbench passes it to the server through "
        "the engine's own variable (LLAMA_API_KEY, VLLM_API_KEY: in no argv) and sends it as "
        "`Authorization: Bearer` with every request and /metrics scrape.")
    api_key_file: Path | None = Field(
        None, description="A file whose first line is the server's API key (instead of "
        "api_key_env).")

    @model_validator(mode="after")
    def _one_source(self) -> ApiKeySettings:
        if self.api_key_env is not None and self.api_key_file is not None:
            raise ValueError("api_key_env and api_key_file both name the API key; keep one")
        return self


@dataclass(frozen=True)
class ApiKey:
    """A server's key and where it came from (``source`` names it in messages, never the
    key); ``to_server`` says whether crossbench must hand it to the server."""

    value: str
    source: str
    to_server: bool

    def __repr__(self) -> str:
        return f"ApiKey(source={self.source!r})"  # never the key


def raw_flag_name(arg: str) -> str:
    """The flag name of a raw server argument (``--name`` of ``--name`` or ``--name=value``);
    a UserError when a space follows the name (``"--api-key KEY"`` given as one string), which
    names the flag only: what follows the space may be a key, and is never shown."""
    name = arg.split("=", 1)[0]
    if any(c.isspace() for c in name):
        head = (name.split() or [""])[0]
        raise UserError(f"extra_args: `{head}` and what follows it were given as one argument "
                        "(not shown: it may be a key)",
                        f"give them as two: --server-arg {head} --server-arg VALUE, or "
                        f"--server-arg={head}=VALUE")
    return name


def key_from_args(args: Sequence[str]) -> str | None:
    """The key given as ``--api-key KEY`` or ``--api-key=KEY`` in raw server flags (the first
    of a comma-separated list, as llama-server takes several), else None."""
    for i, arg in enumerate(args):
        if arg == KEY_FLAG and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(KEY_FLAG + "="):
            value = arg.partition("=")[2]
        else:
            continue
        first = value.split(",")[0].strip()
        return first or None
    return None


def key_to_environment(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``argv`` without its ``--api-key KEY`` (or ``--api-key=KEY``), and that ``KEY`` (None
    when there is none, or when the flag holds several values: vLLM's ``--api-key K1 K2``),
    so that the key reaches the server through its environment variable, never its command
    line: a server that prints its arguments (vLLM's "non-default args") cannot write it into
    its log, where a run killed before its trial ends would keep it."""
    for i, arg in enumerate(argv):
        if arg == KEY_FLAG and i + 1 < len(argv) and not argv[i + 1].startswith("-") and (
                i + 2 >= len(argv) or argv[i + 2].startswith("-")):
            return [*argv[:i], *argv[i + 2:]], argv[i + 1]
        if arg.startswith(KEY_FLAG + "="):
            return [*argv[:i], *argv[i + 1:]], arg.partition("=")[2]
    return list(argv), None


MAX_KEY_FILE = 64 * 1024
"""Largest key file read (64 KiB): a key is a line; a larger file is a wrong path."""


def read_key_file(path: Path, setting: str = "api_key_file") -> str:
    """The first line of a key file (blank lines and ``#`` comments skipped): a regular UTF-8
    file of at most :data:`MAX_KEY_FILE` bytes (a device, a FIFO, a directory or a binary
    file is one line naming ``setting``)."""
    fix = "give a readable file whose first line is the key"
    try:
        text = decode_text(read_bytes(path.expanduser(), setting, MAX_KEY_FILE, fix), path,
                           setting)
    except UserError as e:
        if e.message.startswith("cannot read"):
            why = e.message.rpartition(": ")[2]
            raise UserError(f"{setting}: cannot read {path} ({why})", fix) from None
        raise UserError(f"{setting}: {e.message.removeprefix(setting + ' ')}", e.hint) from None
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return checked_key(line.strip(), f"{setting} {path}")
    raise UserError(f"{setting}: {path} holds no key", "write the key on its first line")


def checked_key(value: str, source: str) -> str:
    """``value`` when it can be a key: printable, no control character (a key with a newline
    or an escape would reach a log through the server's header error); UserError naming
    ``source`` (never the key) otherwise."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise UserError(f"{source}: the key holds a control character",
                        "write the key with printable characters only")
    return value


def resolve_key(settings: ApiKeySettings, extra_args: Sequence[str], variable: str | None,
                environ: Mapping[str, str] | None = None) -> ApiKey | None:
    """The key a server will want, from the first source that has one: ``api_key_env``,
    ``api_key_file``, ``--api-key`` in ``extra_args``, the engine's ``variable`` in
    ``environ`` (the environment the server starts with; ``api_key_env`` is read from
    crossbench's own). None: the server takes requests without a key.

    Raises UserError naming the setting when a configured source is empty or two sources
    disagree about where the key comes from.
    """
    env = os.environ if environ is None else environ
    in_args = key_from_args(extra_args)
    configured = settings.api_key_env is not None or settings.api_key_file is not None
    if configured and (in_args is not None or any(a.startswith(KEY_FLAG) for a in extra_args)):
        which = "api_key_env" if settings.api_key_env is not None else "api_key_file"
        raise UserError(f"extra_args: {KEY_FLAG} and {which} both give the server a key",
                        f"drop {KEY_FLAG} from extra_args and keep {which}")
    if settings.api_key_env is not None:
        name = settings.api_key_env
        value = os.environ.get(name, "").strip()
        if not value:
            raise UserError(f"api_key_env: ${name} is not set (or empty)",
                            f"export {name}=<the server's key> before running crossbench")
        return ApiKey(checked_key(value, f"api_key_env ${name}"), f"api_key_env ${name}",
                      to_server=True)
    if settings.api_key_file is not None:
        value = read_key_file(settings.api_key_file)
        return ApiKey(value, f"api_key_file {settings.api_key_file}", to_server=True)
    if in_args is not None:
        return ApiKey(checked_key(in_args, f"{KEY_FLAG} in extra_args"),
                      f"{KEY_FLAG} in extra_args", to_server=False)
    if variable is not None and env.get(variable, "").strip():
        return ApiKey(env[variable].split(",")[0].strip(), f"${variable} of the environment",
                      to_server=False)
    return None


def bearer(key: ApiKey | None) -> dict[str, str]:
    """The ``Authorization`` header that carries ``key`` (empty without one)."""
    return {"Authorization": f"Bearer {key.value}"} if key is not None else {}


def unauthorized(status: int, what: str, key: ApiKey | None) -> RunError:
    """The error of an HTTP 401/403 from ``what`` (``/metrics``, ``/v1/models``, the API):
    the server wants a key crossbench lacks, or refuses the one it sent."""
    if key is None:
        return RunError(f"HTTP {status} from {what}: the server wants an API key", _HOW)
    return RunError(f"HTTP {status} from {what}: the server refused the API key of "
                    f"{key.source}", f"give the key the server was started with ({_HOW})")

