"""The SGLang adapter: typed config -> ``python -m sglang.launch_server`` argv -> a process
group with a known lifecycle (docs/sglang.md). The server always runs with
``--enable-metrics``: SGLang serves ``/metrics`` only then.
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

from crossbench.engines.base import EngineIdentity, MetricsSnapshot
from crossbench.engines.pack import install_record, installed_launcher
from crossbench.engines.process import (
    LocalServer,
    configured_binary,
    http_get,
    http_post,
    on_path,
)
from crossbench.engines.sglang import startup_log
from crossbench.engines.sglang.config import BLOCK, CHAIN, SIMULATE_PREFIX, SglangServerConfig
from crossbench.engines.sglang.metrics import RUNNING
from crossbench.engines.sglang.profile import SglangProfile, is_standin, profile_for
from crossbench.errors import UserError

_FLAG_RE = re.compile(r"--?[A-Za-z]")
#: flags the adapter sets from typed fields; extra_args may not repeat them
_MANAGED = ("--model-path", "--model", "--revision", "--host", "--port", "--enable-metrics",
            "--served-model-name", "--speculative-algorithm", "--speculative-num-steps",
            "--speculative-eagle-topk", "--speculative-num-draft-tokens",
            "--speculative-dflash-block-size", "--speculative-draft-model-path",
            "--speculative-draft-model", "--speculative-draft-model-revision")
_VERSION_CODE = "import sglang; print(sglang.__version__)"


def version_text(binary: Path, release: str) -> str:
    """``sglang.__version__`` of the interpreter ``binary`` (stand-in launchers answer theirs);
    UserError where it cannot run or cannot import sglang (the fix names ``release``)."""
    try:
        out = subprocess.run([str(binary), "-c", _VERSION_CODE], capture_output=True,
                             text=True, timeout=120, check=False)
    except OSError as e:
        raise UserError(f"cannot run {binary}: {e}", "set binary to the Python "
                        "interpreter that has sglang installed") from e
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        raise UserError(f"binary: {binary} cannot import sglang",
                        f"pip install sglang=={release} into it (needs a "
                        "GPU machine), or set binary to an interpreter that has it")
    return lines[-1].strip()


class SglangServer(LocalServer):
    """SGLang's ``launch_server`` behind the common lifecycle.

    Example::

        cfg = SglangServerConfig(model="hf://Qwen/Qwen3-8B@b968826d",
                                 spec={"type": "EAGLE3", "n": 3,
                                       "draft_model": "AngelSlim/Qwen3-8B_eagle3"})
        with SglangServer(cfg, log_path=Path("run/server.log")) as srv:
            snap = srv.scrape()   # sglang:* series, label model_name
    """

    kind = "sglang"
    in_flight_metric = RUNNING
    api_key_variable = None  # SGLang takes its key only as --api-key
    startup_hints = ((("unrecognized arguments",), "a flag is unknown to this SGLang; check "
                      "version: against the installed sglang"),)

    def __init__(self, config: SglangServerConfig, log_path: Path) -> None:
        super().__init__(config.host, config.port, log_path, config, config.extra_args,
                         config.cpus)
        self.config = config
        self._binary: Path | None = None
        self._version_text: str | None = None
        self._info: dict[str, Any] = {}
        self._served: list[str] = []
        self.stop_report: dict[str, Any] = {}
        self._log_offset = 0
        self._t_spawn = 0.0
        self._cut: dict[str, Any] = {}
        self._caches: dict[str, Path] = {}
        self._caches_before: dict[str, int] = {}

    @property
    def profile(self) -> SglangProfile:
        """Flags, algorithms, metrics and routes of the configured release."""
        return profile_for(self.config.version)

    @property
    def binary(self) -> Path:
        """The Python interpreter with sglang: config ``binary``, else the launcher of this
        release that `crossbench engines install sglang` wrote, else python3 on PATH."""
        if self._binary is None:
            self._binary = configured_binary(self.config.binary, "python3 on PATH") or \
                installed_launcher("sglang", self.config.version) or \
                on_path("python3", "set binary: /path/to/python (the interpreter that has "
                        "sglang installed)")
        return self._binary

    @property
    def served_model_name(self) -> str:
        """The name requests carry in ``model``."""
        return self.config.served_model_name or self.config.model_path()[0]

    def base_environment(self) -> dict[str, str]:
        """crossbench's environment with the config's ``env`` over it, and SGLang's simulated
        acceptance (``SGLANG_SIMULATE_ACC_*``) only from ``spec.synth_len``: an inherited
        value would script a run that records real acceptance, so it is dropped."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(SIMULATE_PREFIX)}
        return {**inherited, **self.config.env, **self.config.spec.simulate_env()}

    def warnings(self) -> list[str]:
        """The config's warnings (a host reachable from the network), and simulated-acceptance
        variables in crossbench's environment (not passed on)."""
        dropped = sorted(k for k in os.environ if k.startswith(SIMULATE_PREFIX))
        notes = [f"{', '.join(dropped)} in crossbench's environment is not passed to SGLang "
                 "(set spec.synth_len for simulated acceptance)"] if dropped else []
        return self.config.warnings() + notes

    # -- inputs -------------------------------------------------------------------------------

    def validate_static(self) -> None:
        """Check the algorithm and every flag against the release's profile, without the
        interpreter or the model."""
        self.argv(self.profile, "python3")

    def validate(self) -> None:
        """Everything :meth:`validate_static` checks, plus the installed release, a local
        model folder and the port."""
        cfg = self.config
        self.validate_static()
        if not os.access(self.binary, os.X_OK):
            raise UserError(f"binary: {self.binary} is not executable", "chmod +x it")
        release = self.version_text().partition("+")[0]
        if release != cfg.version:
            raise UserError(f"version: the config pins SGLang {cfg.version} but "
                            f"{self.binary} has sglang {self.version_text()!r}",
                            f"set version: {release} (make its profile first if "
                            "engines/sglang has none), or install sglang=="
                            f"{cfg.version}")
        path, _ = cfg.model_path()
        if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().exists():
            raise UserError(f"model: {path} does not exist",
                            "fix the path, or give OWNER/REPO or hf://OWNER/REPO@REVISION")
        self.check_block_drafter()
        self.check_conv_state_dtype()
        _ = self.api_key
        self._check_port_free()

    def check_conv_state_dtype(self) -> None:
        """For a local model folder with linear-attention layers (Qwen3.5, Qwen3-Next: a gated
        delta-net with a conv state) served in float16: SGLang 0.5.17 keeps the conv state in
        ``SGLANG_MAMBA_CONV_DTYPE`` (default bfloat16), and its Triton ``causal_conv1d``
        refuses the two dtypes together while the start captures the prefill CUDA graph
        ("Mismatched type for col0 ... bf16 ... fp16"; every start of the study's
        ``sglang-rest``, 2026-12-06). Refused here, before a start is spent."""
        path, _ = self.config.model_path()
        if not path.startswith(("/", "./", "../", "~")):
            return  # OWNER/REPO: SGLang reads its config at start-up
        try:
            data = json.loads((Path(path).expanduser() / "config.json").read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        nested = data.get("text_config")
        text: dict[str, Any] = nested if isinstance(nested, dict) else {}
        layers = text.get("layer_types") or data.get("layer_types") or []
        if "linear_attention" not in layers:
            return
        dtype = self.config.dtype
        if dtype in (None, "auto"):
            dtype = text.get("torch_dtype") or data.get("torch_dtype")
        if dtype not in ("float16", "half"):
            return
        conv = self.base_environment().get("SGLANG_MAMBA_CONV_DTYPE", "bfloat16")
        if conv != "float16":
            raise UserError(
                f"env: {path} has linear-attention layers and runs in float16, but "
                f"SGLANG_MAMBA_CONV_DTYPE is {conv}: SGLang {self.config.version} keeps the "
                "conv state in that dtype and its causal_conv1d kernel refuses the mix at "
                "start-up", "add env: {SGLANG_MAMBA_CONV_DTYPE: float16} to the server "
                "settings, or serve the model in bfloat16 (dtype: bfloat16)")

    def check_block_drafter(self) -> None:
        """For DFLASH with a local draft folder: the folder is a DFlash drafter and its
        block holds the n+1 tokens of a step (n at most its ``block_size`` - 1). SGLang
        itself only warns when the two differ and runs the drafter on blocks it was not
        made for (``dflash_worker_v2.py`` of 0.5.17)."""
        spec = self.config.spec
        if spec.type not in BLOCK or spec.draft_model is None or spec.n is None:
            return
        if not spec.draft_model.startswith(("/", "./", "../", "~")):
            return  # OWNER/REPO: SGLang reads its config at start-up
        folder = Path(spec.draft_model).expanduser()
        config = folder / "config.json"
        if not config.is_file():
            raise UserError(f"spec.draft_model: {folder} has no config.json",
                            "give the DFlash drafter's Hugging Face folder (config.json "
                            "with architectures DFlashDraftModel and block_size)")
        try:
            data = json.loads(config.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            raise UserError(f"spec.draft_model: cannot read {config}: {e}",
                            "give the DFlash drafter's Hugging Face folder") from None
        arch = list(data.get("architectures") or [])
        if not any("DFlash" in str(a) for a in arch):
            raise UserError(f"spec.draft_model: {folder} is not a DFlash drafter "
                            f"(architectures {arch})", "give a folder whose config.json "
                            "names DFlashDraftModel, or use another spec.type")
        nested = data.get("dflash_config")  # SGLang reads block_size there first
        block = (nested if isinstance(nested, dict) else {}).get("block_size",
                                                                  data.get("block_size"))
        if isinstance(block, int) and spec.n + 1 > block:
            raise UserError(f"spec.n: DFLASH drafts at most {block - 1} tokens per step "
                            f"with {folder} (block_size {block}); n={spec.n} needs a block "
                            f"of {spec.n + 1}", f"set n <= {block - 1}")

    def command(self) -> list[str]:
        """Exact argv of the server (the port is 0 until :meth:`start` picks one)."""
        try:
            binary = str(self.binary)
        except UserError:
            binary = str(self.config.binary or "python3")
        return self.argv(self.profile, binary)

    def argv(self, prof: SglangProfile, binary: str) -> list[str]:
        """The argv for a release's profile; UserError for anything the release lacks.

        Server flags come only from the server settings and the speculative ones only from
        ``spec``, so a baseline and its speculative arm differ in the ``--speculative-*``
        flags and nothing else."""
        cfg, spec = self.config, self.config.spec
        if spec.enabled and spec.type not in prof.algorithms:
            raise UserError(f"spec.type: {prof.label} has no speculative algorithm "
                            f"{spec.type!r}", "use one of: " + ", ".join(prof.algorithms))
        argv = [binary, "-m", "sglang.launch_server"]

        def add(flag: str, value: Any, setting: str) -> None:
            if value is None:
                return
            prof.check_flag(flag, setting)
            argv.extend([flag, str(value)])

        def switch(flag: str, value: bool | None, setting: str) -> None:
            if value:
                prof.check_flag(flag, setting)
                argv.append(flag)

        path, revision = cfg.model_path()
        add("--model-path", path, "model")
        add("--revision", revision, "revision")
        add("--served-model-name", cfg.served_model_name, "served_model_name")
        add("--host", cfg.host, "host")
        add("--port", self._port or 0, "port")
        switch("--enable-metrics", True, "(crossbench reads /metrics)")
        add("--tp-size", cfg.tp_size, "tp_size")
        add("--mem-fraction-static", cfg.mem_fraction_static, "mem_fraction_static")
        add("--context-length", cfg.context_length, "context_length")
        add("--max-running-requests", cfg.max_running_requests, "max_running_requests")
        add("--chunked-prefill-size", cfg.chunked_prefill_size, "chunked_prefill_size")
        switch("--disable-radix-cache", cfg.disable_radix_cache, "disable_radix_cache")
        add("--random-seed", cfg.random_seed, "random_seed")
        add("--dtype", cfg.dtype, "dtype")
        add("--attention-backend", cfg.attention_backend, "attention_backend")
        switch("--trust-remote-code", cfg.trust_remote_code, "trust_remote_code")
        if spec.enabled:
            assert spec.n is not None  # the config requires n with a method
            add("--speculative-algorithm", spec.type, "spec.type")
            if spec.draft_model is not None:
                draft, draft_rev = spec.draft_model, None
                if draft.startswith("hf://"):
                    draft, _, draft_rev = draft[len("hf://"):].partition("@")
                add("--speculative-draft-model-path", draft, "spec.draft_model")
                add("--speculative-draft-model-revision", draft_rev, "spec.draft_model")
            if spec.type in CHAIN:
                add("--speculative-num-steps", spec.n, "spec.n")
                add("--speculative-eagle-topk", 1, "spec.n")
            if spec.type in BLOCK:  # SGLang sets its steps and topk to 1 itself
                add("--speculative-dflash-block-size", spec.n + 1, "spec.n")
            add("--speculative-num-draft-tokens", spec.n + 1, "spec.n")
        for arg in cfg.extra_args:
            if not _FLAG_RE.match(arg):
                continue
            name = arg.split("=", 1)[0]
            if name in _MANAGED:
                raise UserError(f"extra_args: {name} is set by crossbench",
                                "use the typed setting (model, revision, host, port, "
                                "served_model_name, spec) instead")
            prof.check_raw_flag(arg)
        return argv + list(cfg.extra_args)

    # -- lifecycle ----------------------------------------------------------------------------

    def request_extras(self, cache_prompt: bool) -> dict[str, Any]:
        """Usage on every chunk (tokens per chunk) and the final usage chunk; the radix
        cache is a server setting here (``disable_radix_cache``), not a request field."""
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def start(self) -> None:
        """Spawn ``launch_server`` in a new session; it dies if crossbench dies."""
        self._info, self._cut = {}, {}
        self._log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        self._caches = startup_log.kernel_cache_roots(self.base_environment())
        self._caches_before = startup_log.cache_counts(self._caches)
        self._t_spawn = time.monotonic()
        self._spawn()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll ``/health`` until 200 and ``/v1/models`` until it answers, then read the
        server info; fail fast when the server exits."""
        timeout = timeout_s if timeout_s is not None else self.config.ready_timeout_s
        self._served = self._poll_openai_ready(timeout, "CUDA graph capture takes minutes")
        with contextlib.suppress(OSError, ValueError):
            status, body = http_get(self.base_url + self.profile.server_info_path,
                                    timeout=10.0, headers=self.auth_headers())
            if status == 200:
                self._info = json.loads(body)
        self._record_start()

    def _record_start(self) -> None:
        """This start's phases (``startup_cut`` of the manifest): seconds from spawn to ready,
        what SGLang's log says of its weights, KV cache and CUDA graph captures, and the
        kernel caches' entries before and after it with the start's kind (``cold``, ``warm``
        or ``partial``: :func:`crossbench.engines.sglang.startup_log.start_kind`), which
        ``crossbench plan`` prices apart."""
        try:
            with self._log_path.open("rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        after = startup_log.cache_counts(self._caches)
        self._cut = {"ready_s": round(time.monotonic() - self._t_spawn, 3),
                     **startup_log.parse(text).to_dict(),
                     "kernel_caches": {name: {"root": str(root),
                                              "before": self._caches_before[name],
                                              "after": after[name]}
                                       for name, root in self._caches.items()},
                     "start": startup_log.start_kind(self._caches_before, after)}

    def reset_cache(self) -> dict[str, Any]:
        """``POST /flush_cache``: SGLang 0.5.17 empties its radix cache, KV and draft pools and
        the allocator's cache, resets the scheduler's metrics and the speculative worker's own
        state (``clear_cache_pool``: NGRAM's corpus), when no request runs
        (``Scheduler.flush_cache``; it answers 400 otherwise). With ``disable_radix_cache``
        and no NGRAM nothing is kept between requests, so nothing is flushed (a flush would
        only empty the allocator's cache for the next trial to refill) and the record says so.
        NGRAM's corpus keeps the tokens of every request the start has served, whatever the
        radix cache: a trial after another on the same start would draft from the earlier
        trial's outputs (sglang-rest, 2026-12-06: c=16 after c=1 replayed them), so it is
        always flushed: any method the registration lists in ``shared_drafts``."""
        from crossbench.engines import registry

        kind = self.config.spec.type  # a method whose drafts outlive the radix cache
        shared = registry.shared_drafts("sglang", kind)
        if self.config.disable_radix_cache and shared is None:
            return {"method": "none-needed", "ok": True,
                    "reason": "the radix cache is off (disable_radix_cache)"}
        try:
            status, body = http_post(self.base_url + "/flush_cache", timeout=60.0,
                                     headers=self.auth_headers())
        except OSError as e:
            return {"method": "flush_cache", "ok": False, "error": str(e)}
        out: dict[str, Any] = {"method": "flush_cache", "ok": status == 200}
        if shared is not None:
            out["reason"] = f"{kind}'s corpus keeps every served request's tokens"
        if status != 200:
            out["error"] = f"HTTP {status} {body[:200]!r}"
        return out

    def scrape(self) -> MetricsSnapshot:
        """GET ``/metrics`` (served with ``--enable-metrics``, which crossbench passes)."""
        return self._read_metrics("the server runs without --enable-metrics; crossbench "
                                  "passes it, so check extra_args and the log")

    def props(self) -> dict[str, Any]:
        """The server info (a few of its keys), the served models, stand-in or not."""
        keep = ("version", "speculative_algorithm", "speculative_num_steps",
                "speculative_eagle_topk", "speculative_num_draft_tokens",
                "speculative_dflash_block_size", "tp_size",
                "max_total_num_tokens", "disable_radix_cache", "served_model_name")
        out: dict[str, Any] = {"served_models": list(self._served),
                               "standin": is_standin(self.version_text())}
        info = {k: self._info[k] for k in keep if k in self._info}
        simulated = self.config.spec.simulate_env()
        if simulated:  # a speculative setting (the spec axis of a pair), in words
            info["speculative_config"] = (
                "simulated acceptance: mean accepted length "
                f"{simulated['SGLANG_SIMULATE_ACC_LEN']} per verification step, not "
                "per-position rates (" + ", ".join(f"{k}={v}" for k, v in
                                                   simulated.items()) + ")")
        if info:
            out["startup"] = info
        if self._cut:
            out["startup_cut"] = dict(self._cut)
        return out

    def version_text(self) -> str:
        """``sglang.__version__`` of the interpreter (stand-in launchers answer theirs)."""
        if self._version_text is None:
            self._version_text = version_text(self.binary, self.config.version)
        return self._version_text

    def identity(self) -> EngineIdentity:
        """Version, hash of the interpreter or launcher, stand-in or not and, for a launcher
        of ``crossbench engines install sglang``, its ``install.json`` (``install``)."""
        text = self.version_text()
        binary = self.binary.resolve()
        digest = hashlib.sha256(binary.read_bytes()).hexdigest()
        extra: dict[str, Any] = {"standin": is_standin(text), "release": text.partition("+")[0],
                                 "profile": self.profile.origin,
                                 "served_model_name": self.served_model_name}
        install = install_record(binary)  # PREFIX/bin/python of `crossbench engines install`
        if install is not None:
            extra["install"] = install
        return EngineIdentity(kind=self.kind, version=text, build_number=None, commit=None,
                              binary=str(binary), sha256={binary.name: digest}, extra=extra)

    def stop(self) -> None:
        """SIGTERM the session, SIGKILL what is left after ``stop_timeout_s`` (SGLang's
        scheduler and detokenizer are child processes), wait for the GPU memory and the port;
        RunError when processes survive SIGKILL. Safe to call twice."""
        self._stop_session(self.config.stop_timeout_s, self.config.gpu_release_timeout_s)
