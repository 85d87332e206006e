"""The vLLM adapter: typed config -> ``vllm serve`` argv -> a process tree with a known lifecycle.

Its lifecycle is docs/vllm.md's "Lifecycle": a new session with a parent-death signal; a stop
that ends the whole session (:func:`crossbench.engines.process.stop_session`) and waits for
its GPU memory; processes that survive SIGKILL are a :class:`~crossbench.errors.RunError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from crossbench import host
from crossbench.engines import cache_pack
from crossbench.engines.base import EngineIdentity, MetricsSnapshot
from crossbench.engines.pack import INSTALL_FILE, install_record
from crossbench.engines.process import (
    LocalServer,
    configured_binary,
    http_post,
    on_path,
)
from crossbench.engines.vllm import startup_cut, startup_log
from crossbench.engines.vllm.config import VllmServerConfig
from crossbench.engines.vllm.metrics import IN_FLIGHT
from crossbench.engines.vllm.profile import (
    VllmProfile,
    is_standin,
    known_profiles,
    not_benchmarkable,
    parse_version,
    profile_for,
)
from crossbench.errors import RunError, UserError

_FLAG_RE = re.compile(r"--?[A-Za-z]")
#: flags the adapter sets from typed fields; extra_args may not repeat them
_MANAGED = ("--model", "--revision", "--host", "--port", "--speculative-config",
            "--per-request-spec-decode-metrics", "--served-model-name")

#: flags that set the compilation config (and with it the capture sizes)
_COMPILATION_FLAGS = ("--compilation-config", "-cc", "-O")
#: flags that size the KV cache (kv_cache_memory_bytes sets the first)
_KV_SIZE_FLAGS = ("--kv-cache-memory-bytes", "--num-gpu-blocks-override")


_VERSION_TEXTS: dict[tuple[object, ...], str] = {}
"""``vllm --version`` outputs by :func:`_executable_key`."""


def _executable_key(binary: Path) -> tuple[object, ...] | None:
    """Identity of an executable for the version cache: its resolved path, size and mtime
    (and text, for a small script), and those of an ``install.json`` beside it (a reinstall
    changes one of them); None when it cannot be read (then nothing is cached)."""
    try:
        path = binary.resolve()
        st = path.stat()
        key: tuple[object, ...] = (str(path), st.st_size, st.st_mtime_ns)
        if st.st_size < 1 << 20:  # launchers and entry-point scripts: their text as well
            key += (hashlib.sha256(path.read_bytes()).hexdigest(),)
        record = path.parent.parent / INSTALL_FILE
        if record.is_file():
            rs = record.stat()
            key += (rs.st_size, rs.st_mtime_ns)
        return key
    except OSError:
        return None


class VllmServer(LocalServer):
    """vLLM's ``vllm serve`` behind the common lifecycle.

    Example::

        cfg = VllmServerConfig(model="hf://Qwen/Qwen3-8B@b968826d",
                               spec={"type": "eagle3", "n": 3,
                                     "draft_model": "AngelSlim/Qwen3-8B_eagle3"})
        with VllmServer(cfg, log_path=Path("run/server.log")) as srv:
            print(srv.base_url)        # http://127.0.0.1:<free port>
            snap = srv.scrape()        # vllm:* series, labels model_name and engine
    """

    kind = "vllm"
    in_flight_metric = IN_FLIGHT
    api_key_variable = "VLLM_API_KEY"  # vllm/envs.py; `--api-key` takes precedence over it
    startup_hints = (
        (("address already in use",), "the port is taken; omit port to pick a free one"),
        (("out of memory", "no available memory for the cache blocks"),
         "lower max_model_len or max_num_seqs, or raise gpu_memory_utilization"),
        (("unrecognized arguments", "error: argument"),
         "a flag is unknown to this vLLM; check version: against `vllm --version`"),
        (("does not exist", "repository not found", "401"),
         "check the model id and revision, and HF_TOKEN for gated models"),
        (("arctic inference is required",),
         "suffix decoding needs `pip install arctic-inference` on the vLLM host"),
    )

    def __init__(self, config: VllmServerConfig, log_path: Path) -> None:
        super().__init__(config.host, config.port, log_path, config, config.extra_args,
                         config.cpus)
        self.config = config
        self._binary: Path | None = None
        self._version_text: str | None = None
        self._log_offset = 0
        self._startup: startup_log.StartupFacts | None = None
        self._served: list[str] = []
        self._build_key: str | None = None
        self._cut: dict[str, Any] = {}
        self._t_spawn = self._t_spawn_wall = 0.0
        #: outcome of the last :meth:`stop`: signals needed, leftovers, GPU release
        self.stop_report: dict[str, Any] = {}

    # -- inputs -------------------------------------------------------------------------------

    @property
    def profile(self) -> VllmProfile:
        """Flags, speculative-config fields, methods and metrics of the pinned release."""
        return profile_for(self.config.version)

    @property
    def binary(self) -> Path:
        """The ``vllm`` executable (config ``binary``, else ``vllm`` on PATH)."""
        if self._binary is None:
            self._binary = configured_binary(self.config.binary, "`vllm` on PATH") or \
                on_path("vllm", f"pip install vllm=={self.config.version} (needs a GPU "
                        "machine), or set binary: /path/to/vllm")
        return self._binary

    @classmethod
    def reuse_settings(cls, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
        """With prefix caching on (vLLM's default), the reset route needs
        ``VLLM_SERVER_DEV_MODE=1``; with it off, nothing is needed."""
        if config.get("enable_prefix_caching") is False:
            return config
        return {**config, "env": {**(config.get("env") or {}), "VLLM_SERVER_DEV_MODE": "1"}}

    def reset_cache(self) -> dict[str, Any]:
        """``POST /reset_prefix_cache``, which vLLM serves only with ``VLLM_SERVER_DEV_MODE=1``
        (set it in ``env``; crossbench does when trials reuse a server). With prefix caching
        off there is nothing to reset, and the record says so."""
        if self.config.enable_prefix_caching is False:
            return {"method": "none-needed", "ok": True, "reason": "prefix caching is off"}
        if self.base_environment().get("VLLM_SERVER_DEV_MODE") != "1":
            return {"method": "none", "ok": False,
                    "reason": "vLLM serves /reset_prefix_cache only in dev mode: set env "
                              "VLLM_SERVER_DEV_MODE: '1', or enable_prefix_caching: false"}
        try:
            status, body = http_post(self.base_url + "/reset_prefix_cache",
                                     headers=self.auth_headers())
        except OSError as e:
            return {"method": "reset_prefix_cache", "ok": False, "error": str(e)}
        ok = status == 200 and bool(json.loads(body or b"{}").get("success"))
        out: dict[str, Any] = {"method": "reset_prefix_cache", "ok": ok}
        if not ok:
            out["error"] = f"HTTP {status} {body[:200]!r}"
        return out

    def warnings(self) -> list[str]:
        """The config's warnings (a host reachable from the network)."""
        return self.config.warnings()

    @property
    def served_model_name(self) -> str:
        """The name requests must carry in ``model`` (vLLM answers 404 to any other)."""
        return self.config.served_model_name or self.config.model_ref().name

    def validate_static(self) -> None:
        """Check method, n, synthetic settings and every flag and spec-config field against
        the pinned release's profile, without the binary or the model files."""
        self.argv(self.profile, "vllm")

    def validate(self) -> None:
        """Everything :meth:`validate_static` checks, plus the binary's reported release,
        local model folders and the port."""
        cfg = self.config
        self.validate_static()
        if not os.access(self.binary, os.X_OK):
            raise UserError(f"binary: {self.binary} is not executable", "chmod +x it")
        release, _ = parse_version(self.version_text())
        if release != cfg.version:
            profiled = any(p.version == release for p in known_profiles())
            raise UserError(
                f"version: the config pins vLLM {cfg.version} but {self.binary} reports "
                f"{self.version_text()!r}",
                (f"set version: {release}" if profiled else
                 f"make a profile for {release} (python -m "
                 "crossbench.engines.vllm.tools.profile_gen WHEEL) and set version to it")
                + f", or install vllm=={cfg.version}")
        for setting, ref in (("model", cfg.model_ref()), ("spec.draft_model",
                                                          cfg.spec.draft_ref())):
            if ref is not None and ref.local and not Path(ref.name).exists():
                raise UserError(f"{setting}: {ref.name} does not exist",
                                "fix the path, or give OWNER/REPO or hf://OWNER/REPO@REVISION")
        _ = self.api_key  # a configured key must be there before anything starts
        self._check_port_free()

    def _check_spec(self, prof: VllmProfile) -> None:
        spec = self.config.spec
        if not spec.enabled:
            if spec.synthetic:
                raise UserError("spec.synth_rates: synthetic acceptance needs a speculative "
                                "method", "set spec.type (e.g. draft_model or ngram), or drop "
                                "synth_rates / synth_len")
            return
        if spec.type in not_benchmarkable():
            raise UserError(f"spec.type: {spec.type!r} is not a method crossbench runs "
                            f"({not_benchmarkable()[spec.type]})",
                            "choose a drafting method such as ngram, eagle3 or mtp")
        if spec.type not in prof.methods:
            have = [p.version for p in known_profiles() if spec.type in p.methods]
            raise UserError(f"spec.type: method {spec.type!r} is not in {prof.label}",
                            f"releases that have it: {', '.join(have)}; pin one of them"
                            if have else "use one of: " + ", ".join(
                                m for m in prof.methods if m not in not_benchmarkable()))
        if spec.type in prof.unsupported:
            raise UserError(f"spec.type: {prof.label} refuses {spec.type!r} at start-up: "
                            f"{prof.unsupported[spec.type]}", "choose another method, or pin "
                            "a release that runs it")
        rule = prof.rule(spec.type)
        if rule.draft_model == "required" and spec.draft_model is None:
            raise UserError(f"spec.draft_model: {spec.type} needs a draft model ({rule.note})",
                            "set draft_model (OWNER/REPO, hf://OWNER/REPO@REV or a folder)")
        if rule.draft_model == "forbidden" and spec.draft_model is not None:
            raise UserError(f"spec.draft_model: {spec.type} takes no draft model ({rule.note})",
                            "drop draft_model, or choose draft_model / eagle3 / ...")
        n = spec.effective_n
        if n is None and rule.n == "required":
            raise UserError(f"spec.n: {spec.type} needs num_speculative_tokens",
                            "set n (tokens drafted per step), e.g. n: 4")
        if n is not None and n < 1:
            raise UserError(f"spec.n: n={n} drafts nothing",
                            "use n >= 1, or type: none for a baseline")
        if spec.synth_rates is not None and n is not None and len(spec.synth_rates) != n:
            raise UserError(f"spec.synth_rates: {len(spec.synth_rates)} rates but n={n}",
                            "give exactly one rate per drafted position")
        if spec.synth_len is not None and n is not None and spec.synth_len > n + 1:
            raise UserError(f"spec.synth_len: {spec.synth_len:g} exceeds n + 1 = {n + 1}",
                            "the mean acceptance length counts at most n drafted tokens + 1")
        if spec.synth_len is not None and n is None:
            raise UserError("spec.synth_len: synthetic acceptance length needs n",
                            "set n (num_speculative_tokens)")
        sources = {"method": "spec.type", "model": "spec.draft_model",
                   "num_speculative_tokens": "spec.n", "rejection_sample_method":
                   "spec.synth_rates" if spec.synthetic else "spec.rejection_sample_method",
                   "synthetic_acceptance_rates": "spec.synth_rates",
                   "synthetic_acceptance_length": "spec.synth_len"}
        for name, value in spec.vllm_fields().items():
            setting = sources.get(name, f"spec.{name}")
            prof.check_spec_field(name, setting)
            if isinstance(value, str):
                prof.check_choice(name, value, setting)

    # -- command ------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """Exact argv of the server (the port is 0 until :meth:`start` picks one).

        Without an installed vLLM (a dry run on another machine) the argv names the
        configured binary, or ``vllm`` as found on PATH where it runs."""
        try:
            binary = str(self.binary)
        except UserError:
            binary = str(self.config.binary or "vllm")
        return self.argv(self.profile, binary)

    def argv(self, prof: VllmProfile, binary: str) -> list[str]:
        """The argv for a release's profile; raises UserError for anything it lacks.

        Server flags come only from the server settings and the speculative ones only from
        ``spec``, so a baseline and its speculative arm differ in ``--speculative-config``
        (and ``--per-request-spec-decode-metrics`` when asked for) and nothing else.
        """
        cfg, spec = self.config, self.config.spec
        self._check_spec(prof)
        argv = [binary, "serve"]

        def add(flag: str, value: Any, setting: str) -> None:
            if value is None:
                return
            prof.check_flag(flag, setting)
            argv.extend([flag, str(value)])

        def switch(name: str, value: bool | None, setting: str) -> None:
            if value is None:
                return
            flag = f"--{name}" if value else f"--no-{name}"
            prof.check_flag(flag, setting)
            argv.append(flag)

        ref = cfg.model_ref()
        add("--model", ref.name, "model")
        add("--revision", ref.revision, "revision")
        add("--served-model-name", cfg.served_model_name, "served_model_name")
        add("--tokenizer", cfg.tokenizer, "tokenizer")
        add("--dtype", cfg.dtype, "dtype")
        add("--quantization", cfg.quantization, "quantization")
        add("--seed", cfg.seed, "seed")
        add("--host", cfg.host, "host")
        add("--port", self._port or 0, "port")
        add("--tensor-parallel-size", cfg.tensor_parallel_size, "tensor_parallel_size")
        add("--data-parallel-size", cfg.data_parallel_size, "data_parallel_size")
        add("--gpu-memory-utilization", cfg.gpu_memory_utilization, "gpu_memory_utilization")
        add("--max-model-len", cfg.max_model_len, "max_model_len")
        add("--max-num-seqs", cfg.max_num_seqs, "max_num_seqs")
        add("--max-num-batched-tokens", cfg.max_num_batched_tokens, "max_num_batched_tokens")
        add("--kv-cache-memory-bytes", cfg.kv_cache_memory_bytes, "kv_cache_memory_bytes")
        switch("enable-prefix-caching", cfg.enable_prefix_caching, "enable_prefix_caching")
        switch("enable-chunked-prefill", cfg.enable_chunked_prefill, "enable_chunked_prefill")
        switch("enforce-eager", cfg.enforce_eager, "enforce_eager")
        switch("async-scheduling", cfg.async_scheduling, "async_scheduling")
        sizes = cfg.capture_sizes()
        if sizes is not None:
            add("--compilation-config", json.dumps({"cudagraph_capture_sizes": sizes},
                                                   separators=(",", ":")), "cudagraph_sizes")
        if spec.enabled:
            add("--speculative-config", json.dumps(spec.vllm_fields(), separators=(",", ":")),
                "spec")
            level = cfg.per_request_spec_decode_metrics
            if level is not None and level != "none":
                add("--per-request-spec-decode-metrics", level,
                    "per_request_spec_decode_metrics")
        for arg in cfg.extra_args:
            if not _FLAG_RE.match(arg):
                continue  # a value (negative numbers included)
            name = arg.split("=", 1)[0]
            if name.replace("_", "-") in _MANAGED:
                raise UserError(f"extra_args: {name} is set by crossbench",
                                "use the typed setting (model, revision, host, port, spec, "
                                "served_model_name, per_request_spec_decode_metrics) instead")
            if sizes is not None and name.replace("_", "-").startswith(_COMPILATION_FLAGS):
                raise UserError(f"extra_args: {name} would override cudagraph_sizes decode",
                                "drop it, or set cudagraph_sizes: default")
            if cfg.kv_cache_memory_bytes is not None and \
                    name.replace("_", "-") in _KV_SIZE_FLAGS:
                raise UserError(f"extra_args: {name} would resize the KV cache that "
                                "kv_cache_memory_bytes sets", "drop it")
            if name.replace("_", "-") == "--disable-log-stats":
                raise UserError("extra_args: --disable-log-stats turns off the counters "
                                "crossbench reads", "drop it")
            prof.check_raw_flag(arg)
        return argv + list(cfg.extra_args)

    # -- lifecycle ----------------------------------------------------------------------------

    def request_extras(self, cache_prompt: bool) -> dict[str, Any]:
        """Usage on every chunk (tokens per chunk) and the final usage chunk, which carries
        ``metrics.speculative_decoding`` with --per-request-spec-decode-metrics. Prefix
        caching is a server flag here (``enable_prefix_caching``), not a request field."""
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def start(self) -> None:
        """Spawn ``vllm serve`` in a new session; it dies if crossbench dies."""
        if self._proc is not None:
            raise RuntimeError("server already started")
        self._log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        self._startup = None
        root = startup_cut.effective_root(self.base_environment())
        self._cut = {"cudagraph_sizes": self.config.cudagraph_sizes,
                     "capture_sizes": self.config.capture_sizes(),
                     "engine_process": self.config.engine_process,
                     "kv_cache_memory_bytes": self.config.kv_cache_memory_bytes,
                     "compile_cache": self.config.compile_cache,
                     "cache_root": str(root), "build_key": self.build_key(),
                     "entries_before": (len(startup_cut.cache_entries(root))
                                        if self.config.compile_cache != "off" else 0)}
        self._t_spawn, self._t_spawn_wall = time.monotonic(), time.time()
        self._spawn()

    def build_key(self) -> str:
        """The engine build's compile-cache key (:func:`cache_pack.build_key`)."""
        if self._build_key is None:
            self._build_key = cache_pack.binary_build_key(self.version_text(), self.binary)
        return self._build_key

    def base_environment(self) -> dict[str, str]:
        """crossbench's environment with the config's ``env`` over it, the engine core's
        start method (``engine_process``) and the compile cache's variables
        (``compile_cache``: VLLM_CACHE_ROOT of the engine build)."""
        env = {k: v for k, v in {**os.environ, **self.config.env}.items()
               if k != startup_cut.START_METHOD}
        env.update(startup_cut.process_environment(self.config.engine_process))
        mode = self.config.compile_cache
        if mode == "vllm" or (mode == "crossbench" and "VLLM_CACHE_ROOT" in env):
            return env
        key = ""
        if mode == "crossbench":
            try:
                key = self.build_key()
            except (UserError, OSError):
                return env  # no executable here: nothing starts, so no cache is needed
        return {**env, **startup_cut.environment(mode, key, env)}

    def _this_log(self) -> str:
        try:
            with self._log_path.open("rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll ``/health`` until 200, then ``/v1/models`` until it lists the model; then
        parse the startup log. Fails fast if the server exits."""
        timeout = timeout_s if timeout_s is not None else self.config.ready_timeout_s
        self._served = self._poll_openai_ready(timeout,
                                               "compilation and CUDA graphs take minutes")
        if self.served_model_name not in self._served:
            raise RunError(f"vllm serves {self._served}, not {self.served_model_name!r}",
                           "the server's model list and served_model_name disagree; read "
                           f"{self._log_path}")
        text = self._this_log()
        self._startup = startup_log.parse(text)
        self._record_start(text)

    def _record_start(self, text: str) -> None:
        """Start-up phases of this start (``startup_cut`` of the manifest): seconds from
        spawn to ready and to vLLM's phase lines (``log_marks_s``), cold or warm, vLLM's own
        phase durations, whether vLLM overrode ``engine_process: fork``; noted in the cache
        root's index so a pack names the models and configs behind its entries."""
        facts = self._startup
        cut = dict(self._cut)
        cut["ready_s"] = round(time.monotonic() - self._t_spawn, 3)
        cut["log_marks_s"] = startup_log.log_marks(text, self._t_spawn_wall, cut["ready_s"])
        cut["spawn_forced"] = startup_log.spawn_forced(text)
        if facts is not None:
            cut.update({"engine_init_s": facts.engine_init_s, "compile_s": facts.compile_s,
                        "torch_compile_s": facts.torch_compile_s,
                        "graph_capture_s": facts.graph_capture_s,
                        "compile_cache_hit": facts.compile_cache,
                        "logged_capture_sizes": facts.cudagraph_capture_sizes})
        cut["start"] = _start_kind(self.config.compile_cache,
                                   facts.compile_cache if facts is not None else None,
                                   cut["entries_before"])
        self._cut = cut
        if self.config.compile_cache == "crossbench" and facts is not None:
            root = Path(cut["cache_root"])
            config_hash = hashlib.sha256(json.dumps(
                self.config.model_dump(mode="json", exclude={"port", "binary"}),
                sort_keys=True).encode()).hexdigest()[:16]
            # the index is a convenience for packs; a read-only root still serves
            with contextlib.suppress(OSError):
                startup_cut.note_start(root, {
                    "model": self.config.model_ref().name, "config_hash": config_hash,
                    "gpus": host.gpu_names(),
                    "cache_dir": startup_log.cache_dir_of(facts.lines.get("compile_cache_dir")),
                    "start": cut["start"],
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def startup_cut_record(self) -> dict[str, Any]:
        """The last start's cut settings and phases (empty before :meth:`start`)."""
        return dict(self._cut)

    def scrape(self) -> MetricsSnapshot:
        """GET ``/metrics`` (on by default in vLLM) and parse it."""
        return self._read_metrics("do not pass --disable-log-stats (it turns the counters off)")

    def startup_facts(self) -> startup_log.StartupFacts | None:
        """Facts of the last start-up (None before :meth:`wait_ready`)."""
        return self._startup

    def props(self) -> dict[str, Any]:
        """Facts of the running server: startup log, served model, stand-in or not."""
        out: dict[str, Any] = {"served_models": list(self._served),
                               "standin": is_standin(self.version_text())}
        if self._startup is not None:
            out["startup"] = self._startup.to_dict()
        if self._cut:
            out["startup_cut"] = dict(self._cut)
        return out

    def version_text(self) -> str:
        """Output of ``vllm --version``, cached per executable for the process's lifetime
        (keyed by path, size and modification time of the executable and of the install
        record beside it): the command imports vLLM (about 20 s on the H200 host), and a
        matrix makes a server object per trial, so without the cache every vLLM trial paid
        those seconds with its server holding the GPU."""
        if self._version_text is None:
            key = _executable_key(self.binary)
            cached = _VERSION_TEXTS.get(key) if key is not None else None
            if cached is not None:
                self._version_text = cached
                return cached
            try:
                out = subprocess.run([str(self.binary), "--version"], capture_output=True,
                                     text=True, timeout=120, check=False)
            except OSError as e:
                raise UserError(f"cannot run {self.binary}: {e}",
                                "check that it is the vllm executable of this machine") from e
            lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
            self._version_text = lines[-1].strip() if lines else ""
            if key is not None and self._version_text:
                _VERSION_TEXTS[key] = self._version_text
        return self._version_text

    def identity(self) -> EngineIdentity:
        """Version, hash of the executable, whether it is crossbench's stand-in and, for a
        launcher of ``crossbench engines install vllm``, its ``install.json`` (``install``)."""
        text = self.version_text()
        release, local = parse_version(text)
        commit = local[2:] if local and local.startswith("+g") else None
        binary = self.binary.resolve()
        digest = hashlib.sha256(binary.read_bytes()).hexdigest()
        extra: dict[str, Any] = {"standin": is_standin(text), "release": release,
                                 "profile": self.profile.origin,
                                 "served_model_name": self.served_model_name}
        if self._startup is not None:
            extra["startup"] = self._startup.to_dict()
        install = install_record(binary)  # a launcher of `crossbench engines install vllm`
        if install is not None:
            extra["install"] = install
        return EngineIdentity(kind=self.kind, version=text, build_number=None, commit=commit,
                              binary=str(binary), sha256={binary.name: digest}, extra=extra)

    def stop(self) -> None:
        """SIGTERM the session, SIGKILL what is left after ``stop_timeout_s``, wait for the
        GPU memory and the port; RunError when processes survive SIGKILL. Safe to call
        twice."""
        # vLLM shuts its engine cores down on SIGTERM
        self._stop_session(self.config.stop_timeout_s, self.config.gpu_release_timeout_s)


def _start_kind(mode: str, logged: str | None, entries_before: int) -> str:
    """``cold``, ``warm`` or ``partial``: what vLLM's cache lines say (all hit: warm; a
    miss among hits: partial), else whether the cache root held entries before the start."""
    if mode == "off":
        return "cold"
    return {"hit": "warm", "partial": "partial", "miss": "cold"}.get(
        logged or "", "warm" if entries_before else "cold")
