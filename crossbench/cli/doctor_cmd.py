"""``crossbench doctor``: check the machine before a study (the engine binary, other
inference servers, the NVIDIA driver, other GPU processes, utilization, clocks, power limits,
persistence mode); exit 2 when results would be confounded. Without a GPU the GPU checks are
skipped with the reason, and the rest still runs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import user_errors
from crossbench.errors import UserError
from crossbench.telemetry.checks import Check, clocks_and_power, gpu_busy, other_gpu_processes
from crossbench.telemetry.gpu import Nvml, NvmlProvider, NvmlUnavailable

Which = Callable[[str], str | None]


@dataclass(frozen=True)
class DoctorReport:
    """Every check ``doctor`` made, and the exit code they give."""

    engine: str
    checks: list[Check]

    @property
    def failures(self) -> list[Check]:
        """Checks whose state would confound results (or keep a study from running)."""
        return [c for c in self.checks if c.status == "fail"]

    @property
    def exit_code(self) -> int:
        """2 when any check failed, else 0."""
        return 2 if self.failures else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {"engine": self.engine, "exit_code": self.exit_code,
                "checks": [c.to_dict() for c in self.checks]}


def _llama_server_installs() -> list[dict[str, Any]]:
    """crossbench's llama-server builds whose manifests still match their binaries here."""
    from crossbench.engines.llamacpp.build import load_install
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN
    from crossbench.paths import cache_dir

    found = []
    for manifest in sorted((cache_dir() / "engines").glob("*/manifest.json")):
        try:
            data = json.loads(manifest.read_text())
            variant = str(data.get("variant", "cpu"))
            cuda = variant.startswith("cuda-sm")
            inst = load_install(str(data["pin"]), cuda,
                                variant.removeprefix("cuda-sm") if cuda else None)
        except (OSError, ValueError, KeyError, UserError):
            continue
        if inst is not None:
            found.append({"pin": data["pin"], "variant": variant,
                          "build_number": data.get("build_number"),
                          "binary": str(inst.binary())})
    return sorted(found, key=lambda b: (b["pin"] != DEFAULT_PIN, b["pin"], b["variant"]))


def engine_check(engine: str, which: Which = shutil.which,
                 installs: Callable[[], list[dict[str, Any]]] | None = None) -> Check:
    """Whether the engine's binary is here: crossbench's builds first, then ``PATH``."""
    if engine == "llama-server":
        builds = (installs or _llama_server_installs)()
        on_path = which("llama-server")
        details: dict[str, Any] = {"installs": builds, "path": on_path}
        if builds:
            b = builds[0]
            more = f" (+{len(builds) - 1} more)" if len(builds) > 1 else ""
            return Check("engine", "ok", f"llama-server {b['pin']} ({b['variant']}) at "
                         f"{b['binary']}{more}", None, details)
        if on_path:
            return Check("engine", "ok", f"llama-server on PATH: {on_path}", None, details)
        return Check("engine", "fail", "no llama-server: no crossbench build and none on PATH",
                     "run `crossbench engines install llama.cpp` (add --cuda --cuda-arch NN "
                     "for GPUs), or pass `binary:` in the matrix", details)
    if engine == "vllm":
        exe = which("vllm")
        module = importlib.util.find_spec("vllm") is not None
        details = {"path": exe, "module": module}
        if exe or module:
            return Check("engine", "ok", f"vllm found ({exe or 'Python module'})", None, details)
        return Check("engine", "fail", "vllm is not installed here",
                     "install it in this environment: `pip install vllm==<version>`", details)
    raise UserError(f"unknown engine {engine!r}", "use one of: llama-server, vllm")


def _gpu_evidence() -> str | None:
    """Why this host seems to have an NVIDIA GPU even though NVML failed (None: no sign)."""
    if Path("/proc/driver/nvidia").exists():
        return "/proc/driver/nvidia exists"
    if Path("/dev/nvidia0").exists():
        return "/dev/nvidia0 exists"
    if shutil.which("nvidia-smi"):
        return "nvidia-smi is on PATH"
    return None


def _other_engines() -> list[tuple[int, str]]:
    from crossbench.runner.single import other_engine_processes

    return other_engine_processes(set())


def engine_processes_check(found: list[tuple[int, str]]) -> Check:
    """``fail`` when other inference servers run on this host."""
    details = {"processes": [{"pid": p, "name": n} for p, n in found]}
    if not found:
        return Check("engine-processes", "ok", "no other inference server runs here", None,
                     details)
    listed = ", ".join(f"{n} (pid {p})" for p, n in found[:5])
    return Check("engine-processes", "fail",
                 f"other inference servers are running: {listed}; they compete for the same "
                 "cores, memory bandwidth or GPU", "stop them before the study (kill PID)",
                 details)


def run_doctor(engine: str = "llama-server", nvml: NvmlProvider | None = None,
               which: Which | None = None,
               installs: Callable[[], list[dict[str, Any]]] | None = None,
               engines_running: Callable[[], list[tuple[int, str]]] | None = None,
               gpu_evidence: Callable[[], str | None] | None = None,
               max_util_pct: float = 10.0) -> DoctorReport:
    """Run every check. The optional callables replace what is read from this machine (for
    tests): ``which`` the PATH lookup, ``installs`` crossbench's builds, ``engines_running``
    the process list, ``gpu_evidence`` the signs of an NVIDIA GPU; ``nvml`` provides NVML."""
    checks = [engine_check(engine, which or shutil.which, installs),
              engine_processes_check((engines_running or _other_engines)())]
    try:
        nv = Nvml.open(nvml)
    except NvmlUnavailable as e:
        sign = (gpu_evidence or _gpu_evidence)()
        if sign:
            checks.append(Check("driver", "fail", f"an NVIDIA GPU seems present ({sign}) but "
                                f"NVML cannot be used: {e.reason}",
                                "make `nvidia-smi` work (driver loaded, versions matching), "
                                "and `pip install nvidia-ml-py`", {"reason": e.reason}))
        else:
            checks.append(Check("gpu", "info", f"no GPU: {e.reason}; GPU checks skipped",
                                None, {"reason": e.reason}))
        return DoctorReport(engine, checks)
    with nv:
        facts = nv.system_facts()
        visible = nv.indices()
        n = len(visible)
        names = sorted({str(nv.device_facts(i)["name"]) for i in visible})
        checks.append(Check("driver", "ok", f"NVIDIA driver {facts['driver']} (CUDA "
                            f"{facts['cuda_driver_version']}), {n} GPU(s): {', '.join(names)}",
                            None, {**facts, "count": n}))
        checks += [other_gpu_processes(nv), gpu_busy(nv, max_util_pct), *clocks_and_power(nv)]
    return DoctorReport(engine, checks)


def render(report: DoctorReport) -> str:
    """The report as text lines (what ``crossbench doctor`` prints)."""
    lines = [f"crossbench doctor (engine {report.engine})"]
    for c in report.checks:
        lines.append(f"  {c.status:<4}  {c.id:<16}  {c.message}")
        if c.action and c.status in ("warn", "fail"):
            lines.append(f"        {'':<16}  fix: {c.action}")
    n = len(report.failures)
    lines.append(f"{n} problem(s) would confound results (exit 2)" if n
                 else "nothing found that would confound results")
    return "\n".join(lines)


#: where ``crossbench doctor`` reads NVML from (tests replace it with a scripted stand-in)
NVML_PROVIDER: NvmlProvider | None = None


@click.command(epilog="""\b
Examples:
  crossbench doctor
  crossbench doctor --engine vllm --json
""")
@click.option("--engine", default="llama-server", show_default=True,
              type=click.Choice(["llama-server", "vllm"]), help="Engine the study will run.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@user_errors
def doctor(engine: str, as_json: bool) -> None:
    """Check this machine before a study: engine binary, other servers, GPU driver, idle
    GPUs, clocks at stock, power limits at default.

    \b
    Exit codes: 0 nothing would confound results, 2 something would (each problem is printed
    with its fix). Without a GPU the GPU checks are skipped and say why.
    """
    report = run_doctor(engine, nvml=NVML_PROVIDER)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else render(report))
    sys.exit(report.exit_code)
