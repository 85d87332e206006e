"""Servers behind an API key, and secrets on the command line.

Known truth: a random key planted for each test. A keyed llama-server (the real CPU build)
refuses /metrics without it, so a run that succeeds proves requests and scrapes carried it;
then no byte of the run directory, nor of any file of its archive, may hold it. The same holds
for a key given in clear as ``--api-key KEY`` among the server's extra flags, and a 401 names
the key instead of blaming --metrics.
"""

from __future__ import annotations

import json
import secrets
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from crossbench.archive.secrets import scan_lines
from crossbench.cli.main import cli
from crossbench.confounds.provenance import REDACTED, is_secret, redact_argv, secret_values
from crossbench.engines import registry
from crossbench.engines.auth import ApiKeySettings, key_from_args, resolve_key
from crossbench.engines.process import http_get
from crossbench.errors import RunError, UserError
from crossbench.runner.config import RunConfig
from crossbench.runner.single import run

KEY_VAR = "CROSSBENCH_TEST_SERVER_KEY"
CREATOR = "Doe, Jane;Example Lab;0000-0002-1825-0097"


def planted() -> str:
    """A fresh random key (digits and letters, as real keys are)."""
    return "k" + secrets.token_hex(16)


def engine(binary: Path, target: Path, **extra: Any) -> dict[str, Any]:
    return {"binary": str(binary), "model": str(target), "ctx_size": 2048, **extra}


def config(binary: Path, target: Path, **extra: Any) -> RunConfig:
    return RunConfig.model_validate({
        "engine_config": engine(binary, target, **extra), "trials": 1,
        "load": {"requests": 3, "warmup": 1, "max_tokens": 16}})


def holding(root: Path, needle: str) -> list[str]:
    """Files under ``root`` whose bytes contain ``needle``."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and needle.encode() in p.read_bytes())


def archived(run_dir: Path, out: Path) -> dict[str, bytes]:
    """Every file of the zip `crossbench archive` makes of ``run_dir`` (and of its side zips)."""
    r = CliRunner().invoke(cli, ["archive", str(run_dir), "--out", str(out), "--creator",
                                 CREATOR, "--title", "Keyed server", "--date", "2025-01-01"])
    assert r.exit_code == 0, r.output
    files: dict[str, bytes] = {}
    for z in sorted(out.glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            files.update({f"{z.name}:{i.filename}": zf.read(i) for i in zf.infolist()})
    assert len(files) > 20
    return files


# -- redaction: one implementation, every form ----------------------------------------------

@pytest.mark.parametrize(("name", "secret"), [
    ("--api-key", True), ("--hf-token", True), ("--token", True), ("HF_TOKEN", True),
    ("LLAMA_API_KEY", True), ("VLLM_API_KEY", True), ("APIKEY", True), ("--api-keys", True),
    ("LLAMA_PASSWORD", True), ("--secret", True),
    # names of where the secret is (a file, a variable) hold none
    ("--api-key-file", False), ("--api-key-env", False), ("api_key_env", False),
    ("HF_TOKEN_PATH", False), ("--secret-file", False),
    # token counts and tokenizers are everywhere in LLM servers' flags: not secrets
    ("--max-num-batched-tokens", False), ("--tokenizer", False), ("--skip-tokenizer-init", False),
    ("--cache-type-k", False), ("--n-predict", False), ("--spec-ngram-map-k-size-n", False),
])
def test_is_secret_by_words(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_redact_argv_every_form() -> None:
    argv = ["llama-server", "--api-key", "S1", "--hf-token=S2", "--model", "m",
            "--max-num-batched-tokens", "8192", "--tokenizer", "Qwen/Qwen3-8B"]
    assert redact_argv(argv) == ["llama-server", "--api-key", REDACTED, f"--hf-token={REDACTED}",
                                 "--model", "m", "--max-num-batched-tokens", "8192",
                                 "--tokenizer", "Qwen/Qwen3-8B"]
    # crossbench's own command line carries the server's flags inside --server-arg
    cli_argv = ["crossbench", "run", "--server-arg=--api-key=S3", "--server-arg=--token",
                "--server-arg=S4", "--server-arg", "--api-key", "--server-arg", "S5"]
    assert redact_argv(cli_argv) == [
        "crossbench", "run", f"--server-arg=--api-key={REDACTED}", "--server-arg=--token",
        f"--server-arg={REDACTED}", "--server-arg", "--api-key", "--server-arg", REDACTED]
    assert secret_values(argv + cli_argv) == ["S1", "S2", "S3", "S4", "S5"]


def test_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VAR, raising=False)
    none = ApiKeySettings()
    assert resolve_key(none, [], "LLAMA_API_KEY", {}) is None
    with pytest.raises(UserError, match=rf"^api_key_env: \${KEY_VAR} is not set"):
        resolve_key(ApiKeySettings(api_key_env=KEY_VAR), [], "LLAMA_API_KEY", {})
    monkeypatch.setenv(KEY_VAR, "from-env-1")
    got = resolve_key(ApiKeySettings(api_key_env=KEY_VAR), [], "LLAMA_API_KEY", {})
    assert got is not None and got.value == "from-env-1" and got.to_server
    assert "from-env-1" not in repr(got)
    keyfile = tmp_path / "key"
    keyfile.write_text("# the lab's key\n\n  from-file-2  \n")
    got = resolve_key(ApiKeySettings(api_key_file=keyfile), [], "VLLM_API_KEY", {})
    assert got is not None and got.value == "from-file-2" and got.source == f"api_key_file {keyfile}"
    keyfile.write_text("# nothing\n")
    with pytest.raises(UserError, match="api_key_file: .* holds no key"):
        resolve_key(ApiKeySettings(api_key_file=keyfile), [], "VLLM_API_KEY", {})
    # a key already given to the server: crossbench uses it, and hands nothing over
    got = resolve_key(none, ["--api-key=k1,k2"], "LLAMA_API_KEY", {})
    assert got is not None and (got.value, got.to_server) == ("k1", False)
    got = resolve_key(none, [], "LLAMA_API_KEY", {"LLAMA_API_KEY": "inherited"})
    assert got is not None and got.value == "inherited" and not got.to_server
    with pytest.raises(UserError, match="^extra_args: --api-key and api_key_env both"):
        resolve_key(ApiKeySettings(api_key_env=KEY_VAR), ["--api-key", "x"], None, {})
    assert key_from_args(["--alias", "a", "--api-key", "k3"]) == "k3"
    with pytest.raises(UserError, match="api_key_env and api_key_file both name the API key"):
        registry.create("llama-server", {"model": "m", "api_key_env": KEY_VAR,
                                         "api_key_file": str(keyfile)}, tmp_path / "l")
    with pytest.raises(UserError, match="^api_key_env: String should match pattern"):
        registry.create("vllm", {"model": "m", "api_key_env": "not a name"}, tmp_path / "l")


def test_a_matrix_refuses_a_key_in_extra_args(tmp_path: Path) -> None:
    """The matrix file is copied into the run directory as it is: a key there is refused
    (validate and matrix alike), the key's variable is the way."""
    import yaml

    from crossbench.runner.matrix import expand, load_matrix, validate_cells

    data = {"schema_version": 1, "study": {"name": "keyed"},
            "engines": {"llama": {"kind": "llama-server", "pin": "llama-cpp-python==0.3.36"}},
            "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"}},
            "server": {"extra_args": ["--api-key", "abc123def"]},
            "arms": [{"method": "none"}],
            "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:code"],
                     "concurrency": 1}}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    m = load_matrix(path)
    with pytest.raises(UserError) as e:
        validate_cells(m, expand(m, path), path)
    assert e.value.one_line() == (
        f"{path}: cell llama/t/none/builtin-code/c1: extra_args gives --api-key its value "
        "in the matrix file, which is copied into the run directory (fix: keep the key out of "
        "the file: set api_key_env: NAME (or api_key_file: PATH) under server: and export NAME)")
    data["server"] = {"api_key_env": KEY_VAR}
    path.write_text(yaml.safe_dump(data))
    m = load_matrix(path)
    assert validate_cells(m, expand(m, path), path) == []


# -- real llama-server behind a key ---------------------------------------------------------

@pytest.mark.server
def test_keyed_server_run_authenticates_and_records_no_key(
        llama_server: Path, fixture_models: tuple[Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = planted()
    monkeypatch.setenv(KEY_VAR, key)
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    target, _ = fixture_models
    # the server really wants the key: /metrics without it is refused, with it answered
    srv = registry.create("llama-server", engine(llama_server, target, api_key_env=KEY_VAR),
                          tmp_path / "probe.log")
    srv.validate()
    with srv:
        assert http_get(srv.base_url + "/metrics")[0] == 401
        assert "llamacpp:prompt_tokens_total" in srv.scrape().text
        assert key not in " ".join(srv.command())  # given in the environment, in no argv
    run_dir = tmp_path / "run"
    argv = ["crossbench", "run", "--model", str(target), "--api-key-env", KEY_VAR]
    summary = run(config(llama_server, target, api_key_env=KEY_VAR), run_dir, argv=argv)
    assert summary["requests"] == {**summary["requests"], "ok": 3, "error": 0}
    assert "llamacpp:tokens_predicted_total" in (run_dir / "metrics" / "t0-after.prom").read_text()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["engine_config"]["api_key_env"] == KEY_VAR
    assert manifest["trials"][0]["status"] == "ok"
    assert holding(run_dir, key) == []
    files = archived(run_dir, tmp_path / "deposit")
    assert [name for name, data in files.items() if key.encode() in data] == []


@pytest.mark.server
def test_key_in_extra_args_is_redacted_everywhere(
        llama_server: Path, fixture_models: tuple[Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`crossbench run --server-arg=--api-key --server-arg=KEY`: the run works (crossbench
    uses the key it was given) and the key is recorded nowhere."""
    key = planted()
    target, _ = fixture_models
    run_dir = tmp_path / "run"
    args = ["run", "--model", str(target), "--binary", str(llama_server), "--ctx-size", "2048",
            "--requests", "3", "--max-tokens", "16", "--trials", "2",
            "--server-arg=--api-key", f"--server-arg={key}", "--out", str(run_dir)]
    monkeypatch.setattr(sys, "argv", ["crossbench", *args])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert key not in r.output
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["argv"][-4:] == ["--server-arg=--api-key", f"--server-arg={REDACTED}",
                                     "--out", str(run_dir)]
    assert manifest["config"]["engine_config"]["extra_args"] == ["--api-key", REDACTED]
    for trial in manifest["trials"]:
        assert trial["status"] == "ok"
        assert trial["argv"][-2:] == ["--api-key", REDACTED]
        assert trial["provenance"]["argv"][-2:] == ["--api-key", REDACTED]
    headers = [ln for ln in (run_dir / "server.log").read_text().splitlines()
               if ln.startswith("===== crossbench trial")]
    assert len(headers) == 2 and all(ln.endswith(f"--api-key {REDACTED} =====")
                                     for ln in headers)
    assert holding(run_dir, key) == []
    files = archived(run_dir, tmp_path / "deposit")
    assert [name for name, data in files.items() if key.encode() in data] == []


@pytest.mark.server
def test_a_401_names_the_key_not_metrics(llama_server: Path, fixture_models: tuple[Path, Path],
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key crossbench was not told about (a key file given to the server among its raw
    flags): every trial fails with a diagnosis that names the key and how to give it."""
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    target, _ = fixture_models
    keyfile = tmp_path / "server-keys"
    keyfile.write_text(planted() + "\n")
    with pytest.raises(RunError) as e:
        run(config(llama_server, target, extra_args=["--api-key-file", str(keyfile)]),
            tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    error = manifest["trials"][0]["error"]
    assert error == ("HTTP 401 from the API (warm-up): the server wants an API key (fix: set "
                     "api_key_env: NAME (an environment variable holding the key) or "
                     "api_key_file: PATH in the engine config (crossbench run: --api-key-env "
                     "NAME))")
    assert error in str(e.value) and "--metrics" not in str(e.value)
    # without warm-up the first refusal is the scrape's
    with pytest.raises(RunError, match=r"trial 0: HTTP 401 from /metrics: the server wants an "
                       r"API key \(fix: set api_key_env"):
        run(RunConfig.model_validate({
            "engine_config": engine(llama_server, target,
                                    extra_args=["--api-key-file", str(keyfile)]),
            "trials": 1, "load": {"requests": 2, "warmup": 0, "max_tokens": 8}}),
            tmp_path / "run2")


# -- vLLM (stand-in) behind a key -----------------------------------------------------------

def test_keyed_vllm_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM guards /v1/* only: crossbench's /v1/models poll and requests carry the key given
    through VLLM_API_KEY; the stand-in echoes its arguments as vLLM does, and a key given with
    --api-key in extra_args reaches it as VLLM_API_KEY, so the echo never holds it; an
    unknown key fails fast."""
    from standins.vllm import write_launcher

    fast = ("--standin-step-ms", "0", "--standin-prefill-ms", "0")
    binary = write_launcher(tmp_path / "vllm", *fast)
    key = planted()
    monkeypatch.setenv(KEY_VAR, key)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)

    def cfg(**extra: Any) -> RunConfig:
        return RunConfig.model_validate({
            "engine": "vllm", "trials": 1, "load": {"requests": 3, "max_tokens": 16},
            "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B", **extra}})

    summary = run(cfg(api_key_env=KEY_VAR), tmp_path / "env")
    assert summary["requests"]["ok"] == 3
    assert holding(tmp_path / "env", key) == []
    summary = run(cfg(extra_args=["--api-key", key]), tmp_path / "args")
    assert summary["requests"]["ok"] == 3
    log = (tmp_path / "args" / "server.log").read_text()
    # the key went to the server as VLLM_API_KEY, not on its command line: its own echo of
    # its arguments never held it (a kill before the scrub leaves nothing to scrub)
    assert "non-default args: {'model_tag': 'Qwen/Qwen3-8B'}" in log
    assert holding(tmp_path / "args", key) == []
    keyed = write_launcher(tmp_path / "vllm-keyed", *fast, "--api-key", planted())
    srv = registry.create("vllm", {"binary": str(keyed), "model": "Qwen/Qwen3-8B",
                                   "ready_timeout_s": 60}, tmp_path / "keyed.log")
    srv.start()
    with pytest.raises(RunError) as e:
        srv.wait_ready()
    assert e.value.one_line().startswith("HTTP 401 from /v1/models: the server wants an API key "
                                         "(fix: set api_key_env: NAME")
    assert srv.pid is None  # stopped


# -- archive verify catches what redaction would have hidden --------------------------------

def test_scanner_flags_secret_flag_values_not_placeholders() -> None:
    lines = [
        b"===== crossbench trial 0: llama-server --api-key abc123def --port 1 =====",  # 1
        b'  "argv": ["llama-server", "--api-key", "abc123def"],',  # 2
        b'    "--hf-token",',  # 3
        b'    "hf-s3cret-v4lue",',  # 4: the value on the next line (indented JSON)
        b"llama-server --api-key=abc123def",  # 5
        b"non-default args: {'api_key': ['abc123def']}",  # 6
        b"===== crossbench trial 0: llama-server --api-key <redacted> --port 1 =====",
        b'  "argv": ["llama-server", "--api-key", "<redacted>"],',
        b'    "--api-key",', b'    "<redacted>",',
        b"export VLLM_API_KEY=$LAB_KEY; crossbench run --api-key-env LAB_KEY",
        b"pass --api-key flags to the server, e.g. --api-key KEY or --api-key=<key>",
        b'"--max-num-batched-tokens", "8192", "--tokenizer", "Qwen/Qwen3-8B"',
        b'"api_key_env": "LAB_KEY", "api_key_file": null, "VLLM_API_KEY": "<redacted>"',
    ]
    found = [(f.line, f.what) for f in scan_lines("f", lines, [])]
    assert found == [(1, "a secret flag's value (--flag VALUE)"),
                     (2, "a secret flag's value (\"--flag\", \"VALUE\")"),
                     (4, "a secret flag's value (the list item after the flag)"),
                     (5, "a secret flag's value (--flag=VALUE)"),
                     (6, "an API key setting (api_key: VALUE)")]


def test_matrix_dry_run_prints_commands_redacted(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """`crossbench matrix --dry-run` prints each trial's server command through the same
    redaction (a matrix refuses a key in extra_args; a key reaching the argv otherwise, say
    from a third-party adapter, is still not printed)."""
    import crossbench.runner.matrix_run as matrix_run

    plan = [{"cell": "c1", "trial": 0,
             "argv": ["llama-server", "--api-key", "abc123def", "--hf-token=hf-s3cret-1"]}]
    monkeypatch.setattr(matrix_run, "run_matrix", lambda *a, **k: {"dry_run": plan})
    # the command reads the matrix once, itself, before it runs it
    (tmp_path / "m.yaml").write_bytes(
        (Path(__file__).resolve().parents[1] / "matrices" / "cpu-smoke.yaml").read_bytes())
    r = CliRunner().invoke(cli, ["matrix", str(tmp_path / "m.yaml"), "--out",
                                 str(tmp_path / "o"), "--dry-run", "--progress", "plain"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["# c1 trial 0",
                                     f"llama-server --api-key {REDACTED} --hf-token={REDACTED}"]
