"""Command building and input validation of the llama-server adapter (no server started)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from crossbench.engines import registry
from crossbench.engines.llamacpp.server import LlamaServer
from crossbench.errors import UserError

B11312 = "version: 0.5.0-dev (build 11312, commit 0c1e570)"
B11434 = "version: 0.5.0-dev (build 11434, commit 515e855)"


def make(binary: Path, model: Path, tmp_path: Path, **cfg: object) -> LlamaServer:
    server = registry.create("llama-server", {"binary": binary, "model": model, **cfg},
                             tmp_path / "server.log")
    assert isinstance(server, LlamaServer)
    return server


def test_draft_simple_command_uses_new_flag_names(fake_binary, gguf_stub, tmp_path):
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    s = make(fake_binary(B11312), gguf_stub, tmp_path,
             spec={"type": "draft-simple", "n": 4, "draft_model": draft,
                   "synth_rates": [0.9, 0.7, 0.5, 0.2]})
    s.validate()
    argv = s.command()
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "4"
    assert argv[argv.index("--spec-draft-model") + 1] == str(draft)
    assert argv[argv.index("--spec-synth-rates") + 1] == "0.9,0.7,0.5,0.2"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--metrics" in argv
    assert "--draft-max" not in argv


@pytest.mark.parametrize(("method", "flag"), [
    ("ngram-mod", "--spec-ngram-mod-n-max"),
    ("ngram-simple", "--spec-ngram-simple-size-m"),
    ("ngram-map-k", "--spec-ngram-map-k-size-m"),
    ("ngram-map-k4v", "--spec-ngram-map-k4v-size-m"),
    ("ngram-cache", "--spec-draft-n-max"),
    ("draft-mtp", "--spec-draft-n-max"),
])
def test_n_maps_to_the_methods_own_flag(fake_binary, gguf_stub, tmp_path, method, flag):
    s = make(fake_binary(B11312), gguf_stub, tmp_path, spec={"type": method, "n": 8})
    s.validate()
    argv = s.command()
    assert argv[argv.index(flag) + 1] == "8"


def test_baseline_has_no_spec_flags(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path)
    s.validate()
    assert not [a for a in s.command() if a.startswith("--spec")]


def test_missing_model_names_the_field(fake_binary, tmp_path):
    s = make(fake_binary(B11312), tmp_path / "nope.gguf", tmp_path)
    with pytest.raises(UserError, match=r"model: .*nope.gguf does not exist"):
        s.validate()


def test_missing_binary_names_the_install_command(gguf_stub, tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "empty-cache"))
    s = registry.create("llama-server", {"model": gguf_stub}, tmp_path / "log")
    with pytest.raises(UserError) as e:
        s.validate()
    assert "crossbench engines install llama.cpp" in e.value.one_line()


def test_user_binary_that_does_not_exist(gguf_stub, tmp_path):
    s = make(tmp_path / "no-such-server", gguf_stub, tmp_path)
    with pytest.raises(UserError, match="binary: .* does not exist"):
        s.validate()


def test_draft_method_without_draft(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path, spec={"type": "draft-simple", "n": 4})
    with pytest.raises(UserError, match="needs a draft model"):
        s.validate()


def test_ngram_method_with_draft_is_refused(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path,
             spec={"type": "ngram-mod", "draft_model": gguf_stub})
    with pytest.raises(UserError, match="takes no draft model"):
        s.validate()


def test_dflash_block_limit(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path,
             spec={"type": "draft-dflash", "n": 16, "draft_model": gguf_stub})
    with pytest.raises(UserError) as e:
        s.validate()
    assert "n=16 is outside what draft-dflash allows (n <= 15)" in e.value.one_line()
    assert "block of 16" in e.value.one_line()


def test_removed_flag_names_replacement(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path, extra_args=["--draft-max", "8"])
    with pytest.raises(UserError) as e:
        s.validate()
    assert e.value.one_line() == (
        "llama-server b11312 (0c1e570) removed `--draft-max` "
        "(fix: use --spec-draft-n-max or --spec-ngram-mod-n-max)")


def test_flag_drift_between_builds(fake_binary, gguf_stub, tmp_path):
    """b11434 has --spec-draft-sampling; b11312 does not: the error names the build that has it."""
    new = make(fake_binary(B11434), gguf_stub, tmp_path, extra_args=["--spec-draft-sampling"])
    new.validate()
    old_bin = fake_binary(B11312, name="old-server")
    old = make(old_bin, gguf_stub, tmp_path, extra_args=["--spec-draft-sampling"])
    with pytest.raises(UserError, match="has no flag `--spec-draft-sampling`"):
        old.validate()
    with pytest.raises(UserError, match="builds that have it: b11434"):
        old.profile.flag("draft_sampling")


def test_unknown_flag(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path, extra_args=["--spec-draft-nmax"])
    with pytest.raises(UserError, match="has no flag `--spec-draft-nmax`"):
        s.validate()


def test_port_in_use(fake_binary, gguf_stub, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        s = make(fake_binary(B11312), gguf_stub, tmp_path, port=port)
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is in use"):
            s.validate()


@pytest.mark.parametrize(("rates", "message"), [
    ([90, 70], "fractions in \\[0, 1\\] \\(not percentages\\)"),
    ([0.5, 0.7], "non-increasing"),
])
def test_bad_synth_rates(fake_binary, gguf_stub, tmp_path, rates, message):
    with pytest.raises(UserError, match=message):
        make(fake_binary(B11312), gguf_stub, tmp_path,
             spec={"type": "draft-simple", "synth_rates": rates, "draft_model": gguf_stub})


def test_synth_rates_length_must_match_n(fake_binary, gguf_stub, tmp_path):
    s = make(fake_binary(B11312), gguf_stub, tmp_path,
             spec={"type": "draft-simple", "n": 4, "synth_rates": [0.9, 0.5],
                   "draft_model": gguf_stub})
    with pytest.raises(UserError, match="--synth-rates has 2 values but n=4"):
        s.validate()


def test_unknown_config_field_is_named(gguf_stub, tmp_path):
    with pytest.raises(UserError, match="spec.draft_max: unknown field"):
        registry.create("llama-server", {"model": gguf_stub, "spec": {"draft_max": 4}},
                        tmp_path / "log")


def test_unknown_engine_lists_valid(tmp_path):
    with pytest.raises(UserError, match="use one of: llama-server"):
        registry.create("llama-srv", {}, tmp_path / "log")


def test_unknown_build_is_probed_through_help(fake_binary, gguf_stub, tmp_path):
    help_text = (
        "-m, --model FNAME   model path\\n"
        "--port PORT  port\\n--host HOST host\\n-c, --ctx-size N ctx\\n-np, --parallel N p\\n"
        "--metrics  enable\\n--spec-type none,draft-simple  types\\n"
        "--draft-max N  number of tokens to draft\\n"
        "--spec-draft-n-max N  the argument has been removed. use --draft-max\\n"
    )
    b = fake_binary("version: 9999 (abcdef0)",
                    body=f'if [ "$1" = "--help" ]; then printf "%b" "{help_text}"; fi')
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    s = make(b, gguf_stub, tmp_path, spec={"type": "draft-simple", "n": 3, "draft_model": draft})
    assert s.profile.origin.startswith("probe:")
    # An older build that spells the option --draft-max gets that spelling.
    assert s.profile.flag("draft_n_max") == "--draft-max"


@pytest.mark.parametrize(("text", "want"), [
    ("version: 0.5.0-dev (build 11312, commit 0c1e570)\nbuilt with GNU 12.2.0", (11312, "0c1e570")),
    ("version: 4567 (abc1234)\nbuilt with cc", (4567, "abc1234")),
    ("version: 0.5.0-dev (build 0, commit unknown)", (0, None)),
    ("garbage", (None, None)),
])
def test_parse_version(text, want):
    from crossbench.engines.llamacpp.profile import parse_version

    assert parse_version(text) == want


def test_other_engine_processes_are_found(tmp_path):
    """A process named llama-server that crossbench did not start is reported."""
    import shutil
    import subprocess

    from crossbench.runner.single import other_engine_processes

    fake = tmp_path / "llama-server"
    shutil.copy("/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "30"])
    try:
        comm = Path(f"/proc/{proc.pid}/comm")
        for _ in range(500):  # Popen returns after fork; the exec that renames it follows
            if comm.read_text().strip() == "llama-server":
                break
            time.sleep(0.01)
        assert (proc.pid, "llama-server") in other_engine_processes(set())
        assert proc.pid not in [p for p, _ in other_engine_processes({proc.pid})]
    finally:
        proc.kill()
        proc.wait()


def test_a_server_the_tests_did_not_start_is_not_counted(tmp_path, monkeypatch):
    """The suite counts only servers it started (conftest sets OTHER_ENGINES_WITHIN to its
    pid): a llama-server left to the host (its parent gone, so no descendant of this run)
    is not another engine of any test, and is one of the host's when the variable is unset."""
    import os
    import shutil
    import subprocess

    from crossbench.runner.single import OTHER_ENGINES_WITHIN, other_engine_processes

    assert os.environ[OTHER_ENGINES_WITHIN] == str(os.getpid())
    fake = tmp_path / "llama-server"
    shutil.copy("/bin/sleep", fake)
    shell = subprocess.run(["sh", "-c", f"{fake} 30 >/dev/null 2>&1 & echo $!"],
                           capture_output=True, text=True, check=True)
    pid = int(shell.stdout)
    try:
        comm = Path(f"/proc/{pid}/comm")
        for _ in range(500):
            if comm.read_text().strip() == "llama-server":
                break
            time.sleep(0.01)
        assert pid not in [p for p, _ in other_engine_processes(set())]
        monkeypatch.delenv(OTHER_ENGINES_WITHIN)
        assert (pid, "llama-server") in other_engine_processes(set())
    finally:
        os.kill(pid, 9)


def test_thinking_setting_reaches_the_chat_request_only() -> None:
    from crossbench.engines.llamacpp.config import LlamaServerConfig
    from crossbench.engines.llamacpp.server import LlamaServer
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import _client_config

    server = LlamaServer(LlamaServerConfig(model=Path("/m.gguf")), Path("/dev/null"))

    def body(load: dict[str, object]) -> dict[str, object]:
        cfg = RunConfig.model_validate({"engine_config": {"model": "/m.gguf"}, "load": load})
        return _client_config(cfg, server).extra_body

    assert body({"endpoint": "chat", "thinking": False})["chat_template_kwargs"] == {
        "enable_thinking": False}
    assert "chat_template_kwargs" not in body({"endpoint": "chat"})
    assert "chat_template_kwargs" not in body({"endpoint": "completions", "thinking": False})


@pytest.mark.parametrize("build", [B11312, B11434])
def test_split_across_gpus(fake_binary, gguf_stub, tmp_path, build):
    """Two cards: the split mode and proportions reach llama-server as its own flags."""
    s = make(fake_binary(build), gguf_stub, tmp_path, split_mode="row", tensor_split=[1, 1])
    s.validate()
    argv = s.command()
    assert argv[argv.index("--split-mode") + 1] == "row"
    assert argv[argv.index("--tensor-split") + 1] == "1,1"
    with pytest.raises(UserError, match="split_mode"):
        make(fake_binary(build), gguf_stub, tmp_path, split_mode="rows")
