"""vLLM version profiles: which ``vllm serve`` flags, speculative-config fields and methods a
release has, its metric families and the format strings of its startup messages.

Profiles are declarative files in the repository's ``engines/vllm/``: one generated
``X.Y.Z.yaml`` per release (see :mod:`crossbench.engines.vllm.tools.profile_gen`) and the
hand-written ``methods.yaml`` that says what each method needs (a draft model, n). A setting
the pinned release lacks is a :class:`~crossbench.errors.UserError` that names the releases
that have it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines.auth import raw_flag_name
from crossbench.errors import UserError
from crossbench.paths import engines_dir

#: the release a config pins when it names none
DEFAULT_VERSION = "0.33.0"

_VERSION_RE = re.compile(r"\b(\d+\.\d+\.\d+(?:\.post\d+|rc\d+|\.dev\d+)?)(\+[\w.]+)?")


def profiles_dir() -> Path:
    """Folder of vLLM profiles (``CROSSBENCH_ENGINES_DIR`` overrides the checkout's)."""
    return engines_dir() / "vllm"


def version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a release number such as ``0.10.2``."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def parse_version(text: str) -> tuple[str | None, str | None]:
    """(release, local part) from ``vllm --version`` output, e.g. ``("0.33.0", "+cu130")``."""
    m = _VERSION_RE.search(text)
    if not m:
        return None, None
    return m.group(1), m.group(2)


def is_standin(version_text: str) -> bool:
    """Whether a version string is crossbench's stand-in's (never a real vLLM result)."""
    return "standin" in version_text.lower()


@dataclass(frozen=True)
class MethodRule:
    """What a speculative method needs from the spec."""

    draft_model: str  # required | optional | forbidden
    n: str  # required | optional
    note: str = ""


@dataclass(frozen=True)
class VllmProfile:
    """What one vLLM release accepts and exposes."""

    version: str
    source: str
    flags: frozenset[str]
    spec_fields: frozenset[str]
    methods: tuple[str, ...]
    mtp_methods: tuple[str, ...]
    choices: dict[str, tuple[str, ...]]
    unsupported: dict[str, str]
    per_request: dict[str, Any] | None
    metrics: tuple[dict[str, Any], ...]
    log_formats: dict[str, tuple[str, ...]]
    origin: str
    requires_torch: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Human name of the release, e.g. ``vLLM 0.33.0``."""
        return f"vLLM {self.version}"

    def rule(self, method: str) -> MethodRule:
        """The needs of a method (model-specific MTP names follow ``mtp``)."""
        rules = method_rules()
        if method in rules:
            return rules[method]
        if method in self.mtp_methods and "mtp" in rules:
            return rules["mtp"]
        return MethodRule(draft_model="optional", n="optional")

    def check_flag(self, flag: str, setting: str) -> None:
        """Raise UserError naming the releases that have ``flag`` when this one lacks it."""
        self._require(lambda p: flag in p.flags, f"{setting}: {self.label} has no `{flag}`")

    def check_spec_field(self, name: str, setting: str) -> None:
        """Raise UserError naming the releases whose SpeculativeConfig has ``name``."""
        self._require(lambda p: name in p.spec_fields,
                      f"{setting}: {self.label}'s speculative config has no field `{name}`")

    def _require(self, present: Callable[[VllmProfile], bool], problem: str) -> None:
        """Nothing when ``present(self)``; else ``problem`` with the releases that have it."""
        if present(self):
            return
        have = [p.version for p in known_profiles() if present(p)]
        raise UserError(problem, f"releases that have it: {', '.join(have)}; pin version: "
                        f"{have[-1]} to use it, or drop the setting" if have else
                        "no known vLLM release has it; check the spelling")

    def check_choice(self, name: str, value: str, setting: str) -> None:
        """Raise UserError when ``value`` is not a choice of the Literal field ``name``."""
        allowed = self.choices.get(name)
        if allowed is not None and value not in allowed:
            have = [p.version for p in known_profiles() if value in p.choices.get(name, ())]
            raise UserError(f"{setting}: {value!r} is not a {name} of {self.label}",
                            f"use one of: {', '.join(allowed)}"
                            + (f" ({value!r} is in: {', '.join(have)})" if have else ""))

    def check_raw_flag(self, arg: str) -> None:
        """Validate a user-given raw flag (``--name`` or ``--name=value``)."""
        name = raw_flag_name(arg)
        if name in self.flags or name.replace("_", "-") in self.flags:
            return
        have = [p.version for p in known_profiles() if name in p.flags]
        close = sorted(f for f in self.flags if f.startswith(name[:10]))[:5]
        if have:
            hint = f"releases that have it: {', '.join(have)}; drop it for {self.label}"
        elif close:
            hint = f"did you mean one of: {', '.join(close)}?"
        else:
            hint = "see `vllm serve --help` for this release's flags"
        raise UserError(f"extra_args: {self.label} has no flag `{name}`", hint)


@functools.lru_cache(maxsize=1)
def _methods_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((profiles_dir() / "methods.yaml").read_text())
    return data


def method_rules() -> dict[str, MethodRule]:
    """Needs of each speculative method (``engines/vllm/methods.yaml``)."""
    return {name: MethodRule(str(r["draft_model"]), str(r["n"]), str(r.get("note", "")))
            for name, r in _methods_file()["methods"].items()}


def not_benchmarkable() -> dict[str, str]:
    """Methods a profile names that crossbench refuses to run, with the reason."""
    return dict(_methods_file().get("not_benchmarkable") or {})


def _from_dict(d: dict[str, Any], origin: str) -> VllmProfile:
    sc = d.get("speculative_config") or {}
    return VllmProfile(
        version=str(d["version"]),
        source=str(d.get("source", "")),
        flags=frozenset(d.get("serve_flags") or []),
        spec_fields=frozenset((sc.get("fields") or {}).keys()),
        methods=tuple(sc.get("methods") or []),
        mtp_methods=tuple(sc.get("mtp_methods") or []),
        choices={k: tuple(v) for k, v in (sc.get("choices") or {}).items()},
        unsupported=dict(d.get("unsupported_methods") or {}),
        per_request=d.get("per_request_spec_metrics"),
        metrics=tuple(d.get("metrics") or []),
        log_formats={k: tuple(v) for k, v in (d.get("log_formats") or {}).items()},
        origin=origin,
        requires_torch=d.get("requires_torch"),
    )


@functools.lru_cache(maxsize=1)
def known_profiles() -> tuple[VllmProfile, ...]:
    """Every generated profile, oldest release first."""
    out = [_from_dict(yaml.safe_load(p.read_text()), f"profile:{p.name}")
           for p in profiles_dir().glob("*.yaml")
           if re.fullmatch(r"\d+\.\d+\.\d+.*\.yaml", p.name)]
    return tuple(sorted(out, key=lambda x: version_key(x.version)))


def all_spec_fields() -> frozenset[str]:
    """SpeculativeConfig fields of any known release."""
    return frozenset().union(*(p.spec_fields for p in known_profiles()))


def profile_for(version: str, setting: str = "version") -> VllmProfile:
    """The profile of exactly this release; UserError naming the known ones otherwise."""
    for p in known_profiles():
        if p.version == version:
            return p
    known = ", ".join(p.version for p in known_profiles()) or "none"
    raise UserError(
        f"{setting}: no profile for vLLM {version} (known: {known})",
        f"pin a known version, or make one: pip download vllm=={version} --no-deps -d /tmp/w "
        f"&& python -m crossbench.engines.vllm.tools.profile_gen /tmp/w/vllm-*.whl > "
        f"engines/vllm/{version}.yaml",
    )
