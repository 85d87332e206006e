"""Provenance: secrets never reach a record, GGUF facts and hashes equal what the files hold,
GPU facts come from NVML (a scripted stand-in with known values here), and a real CPU run's
record matches its files byte for byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from standins.nvml import ScriptedGpu, ScriptedNvml

from crossbench.confounds.diff import AXES, diff
from crossbench.confounds.normalize import normalize_provenance, normalize_trial
from crossbench.confounds.provenance import (
    REDACTED,
    SCHEMA_VERSION,
    collect,
    engine_environment,
    gguf_facts,
    gpu_facts,
    redact_argv,
)
from crossbench.engines.base import EngineIdentity

HF = "hf_abcdefghijklmnopqrstuvwxyz0123"
MINE = "s3cr3t"
NO_GPU = ScriptedNvml(fail_init="NVML Shared Library Not Found")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_planted_secrets_appear_in_no_output(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("MY_SERVICE_TOKEN", MINE)
    monkeypatch.setenv("VLLM_API_KEY", "vk-123456")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    model = tmp_path / "m.bin"
    model.write_bytes(b"weights")
    identity = EngineIdentity("llama-server", f"version with {MINE} inside", 1, "abc",
                              f"/opt/{HF}/llama-server", {"llama-server": "00"})
    argv = ["llama-server", "--api-key", HF, f"--hf-token={HF}", "--model", str(model),
            "--alias", f"x{MINE}x"]
    record = collect(identity, argv, {"model": model}, nvml=lambda: NO_GPU)
    text = json.dumps(record)
    assert HF not in text and MINE not in text and "vk-123456" not in text
    assert record["env"]["HF_TOKEN"] == REDACTED
    assert record["env"]["VLLM_API_KEY"] == REDACTED
    assert record["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "MY_SERVICE_TOKEN" not in record["env"]  # not an engine variable: not recorded
    assert record["argv"] == ["llama-server", "--api-key", REDACTED, f"--hf-token={REDACTED}",
                              "--model", str(model), "--alias", f"x{REDACTED}x"]
    assert record["engine"]["binary"] == f"/opt/{REDACTED}/llama-server"
    # the normalized view carries no secret either
    assert HF not in json.dumps(normalize_provenance(record))


def test_environment_selection_and_redaction():
    env = {"CUDA_VISIBLE_DEVICES": "1", "GGML_CUDA_NO_PINNED": "1", "LLAMA_ARG_THREADS": "8",
           "VLLM_USE_V2_MODEL_RUNNER": "0", "HF_HUB_OFFLINE": "1", "NCCL_P2P_DISABLE": "1",
           "OMP_NUM_THREADS": "4", "TORCH_CUDA_ARCH_LIST": "9.0", "HF_TOKEN": HF,
           "ZENODO_TOKEN": "z" * 20, "LLAMA_PASSWORD": "p", "PATH": "/usr/bin", "HOME": "/root"}
    got = engine_environment(env)
    assert list(got) == sorted(set(env) - {"PATH", "HOME", "ZENODO_TOKEN"})
    assert got["HF_TOKEN"] == got["LLAMA_PASSWORD"] == REDACTED
    assert got["OMP_NUM_THREADS"] == "4"
    # a flag that names where the secret is (a file, a variable) holds none
    assert redact_argv(["--secret", "s3", "--secret-file", "/k", "--cache-type-k", "q8_0"]) == [
        "--secret", REDACTED, "--secret-file", "/k", "--cache-type-k", "q8_0"]


@pytest.mark.parametrize("endian", ["LITTLE", "BIG"])
def test_gguf_facts_equal_the_gguf_packages_reading(tmp_path, endian):
    import gguf
    import numpy as np

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian[endian])
    w.add_name("tiny")
    w.add_file_type(15)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    w.add_array("tokenizer.ggml.scores", [0.1, 0.2, 0.3])
    w.add_tensor("w", np.zeros((3, 4), np.float32))
    w.add_tensor("v", np.zeros((5,), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    facts = gguf_facts(path)
    reader = gguf.GGUFReader(str(path))
    template = reader.fields["tokenizer.chat_template"].contents()
    assert facts == {
        "architecture": "llama", "name": "tiny", "size_label": None, "file_type": 15,
        "quantization": "Q4_K_M", "parameter_count": 17, "parameter_count_source": "tensors",
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
    }
    assert sum(int(t.n_elements) for t in reader.tensors) == 17
    assert gguf_facts(Path(__file__))["error"] == "not a readable GGUF (GGUF magic invalid)"


def test_gguf_facts_of_the_fixture_pair(fixture_models):
    target, draft = fixture_models
    t, d = gguf_facts(target), gguf_facts(draft)
    assert (t["architecture"], t["quantization"], t["parameter_count"]) == ("qwen3", "F16",
                                                                             25937472)
    assert t["chat_template_sha256"] == d["chat_template_sha256"]  # one tokenizer, one template
    assert d["parameter_count"] < t["parameter_count"]


def test_gpu_facts_from_a_scripted_nvml():
    nv = ScriptedNvml([ScriptedGpu(power_limit_mw=500_000, pcie_gen=(1, 5)),
                       ScriptedGpu(uuid="GPU-1")], driver="570.133.20", cuda_version=12080)
    facts = gpu_facts(lambda: nv)
    assert (facts["available"], facts["driver"], facts["cuda_driver_version"],
            facts["count"]) == (True, "570.133.20", "12.8", 2)
    g0 = facts["gpus"][0]
    assert (g0["name"], g0["power_limit_w"], g0["default_power_limit_w"]) == (
        "NVIDIA H200", 500.0, 700.0)
    assert (g0["pcie_link_gen_current"], g0["pcie_link_gen_max"],
            g0["pcie_link_width_current"], g0["pcie_link_width_max"]) == (1, 5, 16, 16)
    assert (g0["app_clock_sm_mhz"], g0["max_clock_sm_mhz"], g0["persistence_mode"],
            g0["ecc_current"]) == (1980.0, 1980.0, True, True)
    assert nv.initialised == 0  # NVML shut down again
    view = normalize_provenance({"gpu": facts})
    assert view["gpu.count"] == 2 and view["gpus.1.uuid"] == "GPU-1"
    assert view["gpus.0.power_limit_w"] == 500.0


def test_gpu_facts_on_this_host_say_why_there_is_none():
    from crossbench.host import gpu_names

    facts = gpu_facts()
    assert facts["available"] == bool(gpu_names())
    if not facts["available"]:
        assert facts["reason"] and facts["gpus"] == [] and facts["count"] == 0


@pytest.mark.server
def test_provenance_of_a_real_cpu_run_matches_the_files(llama_server, fixture_models,
                                                        tmp_path):
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    target, draft = fixture_models
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(target), "ctx_size": 1024,
                          "spec": {"type": "draft-simple", "n": 2, "draft_model": str(draft)}},
        "trials": 1, "load": {"requests": 2, "warmup": 0, "max_tokens": 16}})
    run(cfg, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    entry = manifest["trials"][0]
    record = entry["provenance"]  # what the runner recorded for the trial
    assert record["schema_version"] == SCHEMA_VERSION
    for role, path in (("model", target), ("draft", draft)):
        assert record["models"][role]["sha256"] == sha256(path)
        assert record["models"][role]["bytes"] == path.stat().st_size
    bin_dir = Path(record["engine"]["binary"]).parent
    assert record["engine"]["sha256"]  # binary and shared libraries
    for name, digest in record["engine"]["sha256"].items():
        assert digest == sha256(bin_dir / name), name
    assert record["argv"] == entry["argv"]
    assert record["gpu"] == {"available": False, "count": 0, "gpus": [],
                             "reason": "no NVIDIA driver or GPU (NVML Shared Library Not Found)"}
    # the record joins the manifest's view: same hashes, and nothing confounding against a
    # view of the same trial without provenance
    view = normalize_trial(manifest, provenance=record)
    assert view["model.sha256"] == sha256(target) and view["draft.sha256"] == sha256(draft)
    assert view["model.gguf.quantization"] == "F16"
    assert normalize_trial(manifest) == view  # the runner's record is the trial's own
    stripped = json.loads(json.dumps(manifest))
    del stripped["trials"][0]["provenance"]
    extra = diff(normalize_trial(stripped), view, AXES["none"])
    assert {d.field.split(".")[0] for d in extra.differences} <= {
        "crossbench", "env", "host", "gpu", "model", "draft", "engine"}
    assert all(d.a is None for d in extra.differences)  # only added facts, none contradicted
    # and a record collected afresh agrees with it on every file hash
    again = collect(manifest["engine"], entry["argv"], {"model": target, "draft": draft},
                    nvml=lambda: NO_GPU)
    assert again["models"]["model"]["sha256"] == record["models"]["model"]["sha256"]


def test_one_card_per_lane_differs_by_card_only(monkeypatch):
    """Two lanes on one host, each engine pinned to its own card by CUDA_VISIBLE_DEVICES:
    each records only its card, as its CUDA device 0, so the diff names the card and the
    setting, not every field of two half-empty GPU lists."""
    nv = ScriptedNvml([ScriptedGpu(uuid="GPU-aaaa-0"), ScriptedGpu(uuid="GPU-bbbb-1")])
    views = []
    for card in ("GPU-aaaa", "GPU-bbbb"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", card)
        facts = gpu_facts(lambda: nv)
        assert facts["count"] == 1
        views.append(normalize_provenance({"gpu": facts,
                                           "env": {"CUDA_VISIBLE_DEVICES": card}}))
    d = diff(*views)
    assert sorted(f.field for f in d.differences) == ["env.CUDA_VISIBLE_DEVICES", "gpus.0.uuid"]


def test_a_tree_modified_outside_the_code_is_benign() -> None:
    """Round 4 of the methods study ran one server group with examples/ moved out of the
    tree (to fit a device call), recorded as `crossbench.dirty`; with `dirty_code` a tree
    modified only in data, docs or tests reads benign, and one modified in code confounds."""
    from crossbench.confounds.provenance import modifies_code

    assert not modifies_code(" D examples/h200/a.zip\n M docs/x.md\n M tests/t.py\n")
    assert not modifies_code('R  README.md -> docs/readme.md\n M "docs/a b.md"\n')
    assert modifies_code(" M crossbench/runner/single.py\n")
    assert modifies_code(" M pyproject.toml\n") and modifies_code(" M matrices/m.yaml\n")
    assert modifies_code("R  examples/x.py -> crossbench/x.py\n")
    clean = {"crossbench.commit": "abc", "crossbench.dirty": False,
             "crossbench.dirty_code": False}
    data = {**clean, "crossbench.dirty": True}
    code = {**data, "crossbench.dirty_code": True}
    assert [(x.field, str(x.kind)) for x in diff(clean, data).differences] == [
        ("crossbench.dirty", "benign")]
    assert {x.field: str(x.kind) for x in diff(clean, code).differences} == {
        "crossbench.dirty": "confounding", "crossbench.dirty_code": "confounding"}
    old = {k: v for k, v in data.items() if k != "crossbench.dirty_code"}  # older records
    assert [str(x.kind) for x in diff(clean, old).differences
            if x.field == "crossbench.dirty"] == ["confounding"]


def test_code_sha256_names_the_code_wherever_it_lies(tmp_path: Path) -> None:
    """The same files hash the same in another folder; a changed byte, a new file or a
    renamed one changes the hash; bytecode caches and the skipped entries do not."""
    from crossbench.confounds.provenance import code_sha256, crossbench_identity, tree_sha256

    def tree(root: Path) -> list[tuple[str, Path]]:
        (root / "pkg" / "sub").mkdir(parents=True)
        (root / "pkg" / "a.py").write_text("x = 1\n")
        (root / "pkg" / "sub" / "b.py").write_text("y = 2\n")
        (root / "prof").mkdir()
        (root / "prof" / "v.yaml").write_text("flags: []\n")
        return [("crossbench", root / "pkg"), ("engines", root / "prof")]

    one, two = tree(tmp_path / "one"), tree(tmp_path / "two")
    base = tree_sha256(one)
    assert tree_sha256(two) == base
    (tmp_path / "two" / "pkg" / "__pycache__").mkdir()
    (tmp_path / "two" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "two" / "pkg" / "_data").mkdir()
    (tmp_path / "two" / "pkg" / "_data" / "copy.yaml").write_text("flags: []\n")
    assert tree_sha256(two, skip=("_data",)) == base
    assert tree_sha256(two) != base  # _data counted when not skipped
    (tmp_path / "one" / "pkg" / "a.py").write_text("x = 2\n")
    assert tree_sha256(one) != base
    (tmp_path / "one" / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "one" / "pkg" / "a.py").rename(tmp_path / "one" / "pkg" / "c.py")
    assert tree_sha256(one) != base
    assert crossbench_identity()["code_sha256"] == code_sha256()
    assert len(code_sha256()) == 64


def test_the_same_code_under_other_git_facts_is_benign() -> None:
    """A device copy whose .git is the session's first commit while its files are a later
    one's records another commit and a modified tree: with equal code_sha256 on both sides
    those read benign; with different code they stay confounding."""
    here = {"crossbench.commit": "360ac4d", "crossbench.dirty": False,
            "crossbench.dirty_code": False, "crossbench.code_sha256": "c0de"}
    device = {"crossbench.commit": "c8c92f2", "crossbench.dirty": True,
              "crossbench.dirty_code": True, "crossbench.code_sha256": "c0de"}
    kinds = {x.field: str(x.kind) for x in diff(here, device).differences}
    assert kinds == {"crossbench.commit": "benign", "crossbench.dirty": "benign",
                     "crossbench.dirty_code": "benign"}
    other = {**device, "crossbench.code_sha256": "beef"}
    kinds = {x.field: str(x.kind) for x in diff(here, other).differences}
    assert set(kinds.values()) == {"confounding"} and "crossbench.code_sha256" in kinds
    older = {k: v for k, v in device.items() if k != "crossbench.code_sha256"}
    assert str(next(x.kind for x in diff(here, older).differences
                    if x.field == "crossbench.commit")) == "confounding"
