"""The llama-server adapter: typed config -> argv -> a managed process with a known lifecycle."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from crossbench.engines.base import EngineIdentity, MetricsSnapshot
from crossbench.engines.llamacpp.build import (
    MANIFEST_NAME,
    hash_binaries,
    load_install,
    parse_variant,
)
from crossbench.engines.llamacpp.config import LlamaServerConfig, n_limit
from crossbench.engines.llamacpp.pins import get_pin
from crossbench.engines.llamacpp.profile import (
    LlamaCppProfile,
    parse_version,
    probe_binary,
    profile_for_build,
    run_version,
)
from crossbench.engines.process import (
    LocalServer,
    configured_binary,
    http_get,
    http_post,
    log_tail,
)
from crossbench.errors import RunError, UserError


def build_recipe(binary: Path) -> dict[str, Any] | None:
    """How a crossbench-built binary was made (variant, CMake flags, compiler), from the
    build's manifest (``ROOT/manifest.json`` beside ``ROOT/build/bin/``); None for a binary
    crossbench did not build. The same recipe on another machine is the same source rebuilt."""
    path = binary.parent.parent.parent / MANIFEST_NAME
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or "variant" not in man:
        return None
    return {k: man.get(k) for k in ("pin", "variant", "cmake_flags", "compiler_version")}


class LlamaServer(LocalServer):
    """llama.cpp's ``llama-server`` behind the common lifecycle.

    Example::

        cfg = LlamaServerConfig(model=Path("t.gguf"),
                                spec={"type": "draft-simple", "n": 4, "draft_model": "d.gguf"})
        with LlamaServer(cfg, log_path=Path("run/server.log")) as srv:
            print(srv.base_url)        # http://127.0.0.1:<free port>
            snap = srv.scrape()        # llamacpp:* counters
    """

    kind = "llama-server"
    in_flight_metric = "llamacpp:requests_processing"
    api_key_variable = "LLAMA_API_KEY"  # `--api-key`'s variable (llama-server --help)
    startup_hints = (
        (("address already in use", "couldn't bind"),
         "the port is taken; omit --port to pick a free one"),
        (("failed to load model", "error loading model"),
         "check that the GGUF file is complete and of an architecture this build knows"),
        (("out of memory", "cudamalloc failed"),
         "lower the context size (-c), offload fewer layers (-ngl), or use a smaller quant"),
        (("invalid argument", "error while handling argument"),
         "a flag value was rejected; see the log line above"),
    )

    def __init__(self, config: LlamaServerConfig, log_path: Path) -> None:
        super().__init__(config.host, config.port, log_path, config, config.extra_args,
                         config.cpus)
        self.config = config
        self._profile: LlamaCppProfile | None = None
        self._binary: Path | None = None

    # -- inputs -------------------------------------------------------------------------------

    @property
    def binary(self) -> Path:
        """The llama-server that will run (the user's own, or crossbench's build of the pin)."""
        if self._binary is None:
            own = configured_binary(self.config.binary,
                                    "`crossbench engines install llama.cpp`")
            if own is not None:
                self._binary = own
            else:
                cuda, arch = parse_variant(self.config.variant)
                inst = load_install(self.config.pin, cuda, arch)
                if inst is None:
                    flag = f" --cuda --cuda-arch {arch}" if cuda else ""
                    pin = "" if self.config.pin.startswith("llama-cpp-python") else \
                        f" --pin {self.config.pin}"
                    raise UserError(
                        f"llama-server for {self.config.pin} ({self.config.variant}) is not built",
                        f"run `crossbench engines install llama.cpp{flag}{pin}` (about 5 min on "
                        "2 cores), or pass --binary /path/to/llama-server",
                    )
                self._binary = inst.binary()
        return self._binary

    @property
    def profile(self) -> LlamaCppProfile:
        """Flags, spec types and metrics of the detected build."""
        if self._profile is None:
            self._profile = probe_binary(self.binary)
        return self._profile

    def validate(self) -> None:
        """Check every input before anything starts; raises UserError naming field and fix."""
        cfg = self.config
        if not os.access(self.binary, os.X_OK):
            raise UserError(f"binary: {self.binary} is not executable", "chmod +x it")
        if not cfg.model.exists():
            raise UserError(f"model: {cfg.model} does not exist",
                            "fix the path; `crossbench fixtures make` writes small test models")
        if cfg.spec.draft_model is not None and not cfg.spec.draft_model.exists():
            raise UserError(f"draft_model: {cfg.spec.draft_model} does not exist",
                            "fix the path")
        self._check_against(self.profile)
        _ = self.api_key  # a configured key must be there before anything starts
        self._check_port_free()

    def static_profile(self) -> LlamaCppProfile | None:
        """The profile this config will meet, known without running anything: the pin's
        profile file, or the probed binary when it exists here; None when unknowable."""
        if self.config.binary is not None:
            return self.profile if self.config.binary.expanduser().exists() else None
        return profile_for_build(get_pin(self.config.pin).build_number)

    def validate_static(self) -> None:
        """Check method, n, synthetic settings and every flag against the expected build,
        without the binary or the model files (a matrix validated on another machine)."""
        prof = self.static_profile()
        if prof is not None:
            self._check_against(prof)

    def _check_against(self, prof: LlamaCppProfile) -> None:
        cfg, spec = self.config, self.config.spec
        if spec.type not in prof.spec_types and prof.spec_types:
            raise UserError(f"spec type {spec.type!r} is unknown to llama-server {prof.label}",
                            f"use one of: {', '.join(prof.spec_types)}")
        rules = prof.methods.get(spec.type, {})
        need = rules.get("draft_model", "forbidden")
        if need == "required" and spec.draft_model is None:
            raise UserError(f"--spec {spec.type} needs a draft model",
                            "pass --draft DRAFT.gguf (draft_model), or choose an n-gram method")
        if need == "forbidden" and spec.draft_model is not None:
            why = rules.get("note", f"{spec.type} does not use a draft model")
            raise UserError(f"--spec {spec.type} takes no draft model ({why})",
                            "drop --draft, or use --spec draft-simple")
        n = self.effective_n()
        n_max, why = n_limit(rules)
        if n is not None and n_max is not None and n > n_max:
            raise UserError(f"n={n} is outside what {spec.type} allows (n <= {n_max})",
                            f"{why}; use n <= {n_max}")
        if spec.enabled and n is not None and n < 1:
            raise UserError(f"n={n} drafts nothing", "use n >= 1, or --spec none for a baseline")
        if spec.synth_rates is not None and n is not None and len(spec.synth_rates) != n:
            raise UserError(
                f"--synth-rates has {len(spec.synth_rates)} values but n={n}",
                "give exactly one rate per drafted position",
            )
        if (spec.synth_rates or spec.synth_len) and not spec.enabled:
            raise UserError("synthetic acceptance needs a speculative method",
                            "add --spec draft-simple (with --draft) or drop --synth-*")
        for arg in cfg.extra_args:
            if arg.startswith("-"):
                _check_not_managed(arg, prof)
                prof.check_raw_flag(arg)
        self.argv(prof, "llama-server")  # every option must map to a flag of this build

    def effective_n(self) -> int | None:
        """n as it will be passed: the configured value, or the length of synth_rates."""
        spec = self.config.spec
        if spec.n is not None:
            return spec.n
        if spec.synth_rates is not None:
            return len(spec.synth_rates)
        return None

    # -- command ------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """Exact argv of the server (flags spelled for the detected build)."""
        return self.argv(self.profile, str(self.binary))

    def argv(self, prof: LlamaCppProfile, binary: str) -> list[str]:
        """The argv for a given build's flags (``command()`` uses the detected build)."""
        cfg, spec = self.config, self.config.spec
        f = prof.flag
        argv = [binary, f("model"), str(cfg.model), f("host"), cfg.host,
                f("port"), str(self._port or 0), f("ctx_size"), str(cfg.ctx_size),
                f("parallel"), str(cfg.parallel), f("metrics")]
        if "--no-webui" in prof.flags:
            argv.append(f("no_webui"))
        optional: list[tuple[str, Any]] = [
            ("n_gpu_layers", cfg.n_gpu_layers), ("flash_attn", cfg.flash_attn),
            ("cache_type_k", cfg.cache_type_k), ("cache_type_v", cfg.cache_type_v),
            ("threads", cfg.threads), ("threads_batch", cfg.threads_batch), ("seed", cfg.seed),
            ("slot_save_path", cfg.slot_save_path), ("split_mode", cfg.split_mode),
            ("tensor_split", ",".join(f"{x:g}" for x in cfg.tensor_split)
             if cfg.tensor_split else None),
        ]
        if spec.enabled:
            rules = prof.methods.get(spec.type, {})
            argv += [f("spec_type"), spec.type]
            n = self.effective_n()
            if n is not None:
                optional.append((str(rules.get("n_option", "draft_n_max")), n))
            optional += [
                ("draft_model", spec.draft_model), ("draft_ngl", spec.draft_ngl),
                ("draft_n_min", spec.n_min), ("draft_p_min", spec.p_min),
                ("draft_sampling", spec.draft_sampling),
                ("ngram_mod_n_min", spec.ngram_mod_n_min),
                ("ngram_mod_n_match", spec.ngram_mod_n_match),
                ("synth_rates", ",".join(f"{r:g}" for r in spec.synth_rates)
                 if spec.synth_rates else None),
                ("synth_len", spec.synth_len),
            ]
        for option, value in optional:
            if value is not None:
                argv += [f(option), str(value)]
        return argv + list(cfg.extra_args)

    # -- lifecycle ----------------------------------------------------------------------------

    def request_extras(self, cache_prompt: bool) -> dict[str, Any]:
        """Per-request prompt cache switch, and timings on every chunk (tokens per chunk and
        the server's own timings and draft counts per request)."""
        return {"cache_prompt": cache_prompt, "timings_per_token": True}

    def start(self) -> None:
        """Spawn llama-server in its own process group; it dies if crossbench dies."""
        self._spawn()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll ``/health`` until 200 (503 means loading); fail fast if the process dies."""
        timeout = timeout_s if timeout_s is not None else self.config.ready_timeout_s
        deadline = time.monotonic() + timeout
        url = self.base_url + "/health"
        while True:
            proc = self._proc
            if proc is None:
                raise RuntimeError("wait_ready() before start()")
            rc = proc.poll()
            if rc is not None:
                tail = log_tail(self._log_path)
                raise RunError(
                    f"llama-server exited with code {rc} during start-up; last log lines:\n{tail}",
                    self._startup_hint(tail),
                )
            try:
                status, _ = http_get(url, timeout=2.0, headers=self.auth_headers())
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                tail = log_tail(self._log_path)
                self.stop()
                raise RunError(
                    f"llama-server did not become ready within {timeout:.0f} s; "
                    f"last log lines:\n{tail}",
                    "raise ready_timeout_s for big models, or read the full log at "
                    f"{self._log_path}",
                )
            time.sleep(0.1)

    def scrape(self) -> MetricsSnapshot:
        """GET ``/metrics`` (enabled by ``--metrics``) and parse it."""
        return self._read_metrics("llama-server needs --metrics (crossbench always passes it)")

    def props(self) -> dict[str, Any]:
        """The server's ``/props`` (build info, default generation settings)."""
        try:
            status, body = http_get(self.base_url + "/props", timeout=10.0,
                                    headers=self.auth_headers())
        except OSError:
            return {}  # informational only; a dead server shows up in the requests
        if status != 200:
            return {}
        data: dict[str, Any] = json.loads(body)
        return data

    @classmethod
    def reuse_settings(cls, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
        """Slot erasure needs ``--slot-save-path``: ``run_dir/slots`` unless one is set
        (nothing is saved there; crossbench only erases)."""
        if config.get("slot_save_path"):
            return config
        (run_dir / "slots").mkdir(parents=True, exist_ok=True)
        return {**config, "slot_save_path": str(run_dir / "slots")}

    def reset_cache(self) -> dict[str, Any]:
        """Erase every slot's cached prompt (``POST /slots/ID?action=erase``, which
        llama-server allows only with ``--slot-save-path``): a reused server then holds no
        earlier request's KV cache. Records the slots and the tokens erased."""
        if self.config.slot_save_path is None:
            return {"method": "none", "ok": False,
                    "reason": "llama-server erases slots only with --slot-save-path: set "
                              "slot_save_path (crossbench does when trials reuse a server)"}
        slots = int(self.props().get("total_slots") or self.config.parallel)
        erased, errors = 0, []
        for i in range(slots):
            try:
                status, body = http_post(f"{self.base_url}/slots/{i}?action=erase",
                                         headers=self.auth_headers())
            except OSError as e:
                errors.append(f"slot {i}: {e}")
                continue
            if status != 200:
                errors.append(f"slot {i}: HTTP {status} {body[:200]!r}")
                continue
            erased += int(json.loads(body).get("n_erased") or 0)
        out: dict[str, Any] = {"method": "slot-erase", "ok": not errors, "slots": slots,
                               "tokens_erased": erased}
        if errors:
            out["errors"] = errors
        return out

    def warnings(self) -> list[str]:
        """The config's warnings (a host reachable from the network)."""
        return self.config.warnings()

    def identity(self) -> EngineIdentity:
        """Version string, build, commit and hashes of the binary and its shared libraries."""
        text = run_version(self.binary)
        build, commit = parse_version(text)
        binary = self.binary.resolve()
        hashes = {name: digest for name, digest in hash_binaries(binary.parent).items()
                  if name == binary.name or ".so" in name}
        extra: dict[str, Any] = {"profile": self.profile.origin}
        recipe = build_recipe(binary)
        if recipe is not None:
            extra["build"] = recipe
        return EngineIdentity(kind=self.kind, version=text, build_number=build, commit=commit,
                              binary=str(binary), sha256=hashes, extra=extra)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after ``stop_timeout_s``; wait for the port."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.config.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # stray children of the group
            os.killpg(proc.pid, signal.SIGKILL)
        self._proc = None
        self._wait_port_free()


#: typed settings whose flags the adapter always passes: a repeat in extra_args would override
#: them unseen (a server bound to another address or port, another model), so it is refused
_MANAGED = {"host": ("--host",), "port": ("--port",), "model": ("--model", "-m")}
_MANAGED_FIX = {
    "host": "use the engine's `host` setting to expose a server knowingly",
    "port": "use the engine's `port` setting (omit it for a free port)",
    "model": "use the `model` setting (a matrix: the target's models entry)",
}


def _check_not_managed(arg: str, prof: LlamaCppProfile) -> None:
    """Refuse a flag of extra_args that repeats one the adapter sets from a typed setting."""
    name = arg.split("=", 1)[0]
    for setting, spellings in _MANAGED.items():
        if name in (*spellings, *prof.options.get(setting, ())):
            raise UserError(f"extra_args: {name} is set by crossbench from `{setting}`",
                            _MANAGED_FIX[setting])
