"""vLLM start-up cut (issue 33 item 5): decode-only CUDA graph sizes and crossbench's compile
cache, against recorded vLLM 0.26.0 logs from an H200 and crossbench's stand-in ``vllm
serve`` (not vLLM)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from bench_loader import load_benchmark
from click.testing import CliRunner
from standins.vllm import write_launcher

from crossbench.cli.main import cli
from crossbench.confounds.diff import Kind, diff
from crossbench.confounds.rules import check_pair
from crossbench.engines import registry
from crossbench.engines.vllm import startup_cut, startup_log
from crossbench.engines.vllm.config import VllmServerConfig
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import UserError

DATA = Path(__file__).parent / "data" / "vllm"
MODEL = "Qwen/Qwen3-8B"
FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0", "--standin-version", "0.26.0")


def _logged(name: str) -> startup_log.StartupFacts:
    return startup_log.parse((DATA / f"startup-0.26.0-h200-{name}.log").read_text())


# -- capture sizes ------------------------------------------------------------------------------


def test_default_sizes_are_what_vllm_0_26_logged_on_the_h200() -> None:
    """Ground truth: vLLM's own engine-config lines (max_num_seqs 16, 8192 batched tokens)."""
    base, draft = _logged("baseline-partial"), _logged("draft")
    assert startup_cut.default_capture_sizes(16, 0, 8192) == base.cudagraph_capture_sizes
    assert startup_cut.default_capture_sizes(16, 4, 8192) == draft.cudagraph_capture_sizes
    assert draft.cudagraph_capture_sizes is not None and \
        draft.cudagraph_capture_sizes[-1] == 160  # the n=4 arm of the study: 23 sizes


def test_decode_sizes_are_a_prefix_up_to_the_largest_decode_step() -> None:
    assert startup_cut.decode_capture_sizes(16, 0) == [1, 2, 4, 8, 16]
    assert startup_cut.decode_capture_sizes(16, 2) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert startup_cut.decode_capture_sizes(16, 4)[-1] == 80  # 16 sequences x 5 tokens
    assert startup_cut.decode_capture_sizes(1, 0) == [1]
    # 5 sequences x 3 tokens = 15: the V1 runner rounds 16 up to 18, which only 24 keeps
    assert startup_cut.decode_capture_sizes(5, 2) == [1, 2, 4, 8, 16, 24]


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _v1_full_decode(sizes: list[int], q: int) -> list[int]:
    """vLLM 0.26.0 ``adjust_cudagraph_sizes_for_spec_decode`` (V1 runner, full decode
    graphs, speculation): sizes rounded up to multiples of q, those above the max dropped."""
    top = max(sizes)
    return sorted({_round_up(s, q) for s in sizes if _round_up(s, q) <= top}) or (
        [q] if q <= top else [])


def _v2_decode(sizes: list[int], q: int, seqs: int) -> list[int]:
    """vLLM 0.26.0 V2 runner (``cudagraph_utils._init_candidates``): uniform-decode graphs."""
    top = max(sizes)
    return sorted({_round_up(s, q) for s in sizes
                   if _round_up(s, q) <= min(seqs * q, top)})


def _pad(graphs: list[int], tokens: int) -> int | None:
    return next((g for g in graphs if g >= tokens), None)


@pytest.mark.parametrize("seqs", [1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 64])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7, 8, 15])
def test_every_decode_step_pads_to_the_default_graph(seqs: int, n: int) -> None:
    """For k = 1..max_num_seqs sequences of n+1 tokens, the graph a decode step runs is the
    same with the cut as with the default list, under the plain padding, the V1 runner's
    rounding and the V2 runner's decode graphs."""
    q = n + 1
    full = startup_cut.default_capture_sizes(seqs, n, 8192)
    cut = startup_cut.decode_capture_sizes(seqs, n, 8192)
    assert cut == full[:len(cut)]  # a prefix of vLLM's own list
    for k in range(1, seqs + 1):
        tokens = k * q
        assert _pad(cut, tokens) == _pad(full, tokens), (k, "plain")
        if q > 1:
            assert _pad(_v1_full_decode(cut, q), tokens) == \
                _pad(_v1_full_decode(full, q), tokens), (k, "V1")
            assert _pad(_v2_decode(cut, q, seqs), tokens) == \
                _pad(_v2_decode(full, q, seqs), tokens), (k, "V2")


# -- config and argv ----------------------------------------------------------------------------


def _server(tmp_path: Path, **cfg: Any) -> VllmServer:
    srv = registry.create("vllm", {"model": MODEL, "version": "0.26.0", **cfg},
                          tmp_path / "server.log")
    assert isinstance(srv, VllmServer)
    return srv


def test_decode_sizes_reach_the_argv_per_arm(tmp_path: Path) -> None:
    base = _server(tmp_path, max_num_seqs=16, cudagraph_sizes="decode")
    spec = _server(tmp_path, max_num_seqs=16, cudagraph_sizes="decode",
                   spec={"type": "ngram", "n": 2})
    a, b = base.argv(base.profile, "vllm"), spec.argv(spec.profile, "vllm")
    assert json.loads(a[a.index("--compilation-config") + 1]) == {
        "cudagraph_capture_sizes": [1, 2, 4, 8, 16]}
    assert json.loads(b[b.index("--compilation-config") + 1]) == {
        "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32, 40, 48]}
    plain = _server(tmp_path, max_num_seqs=16)
    assert "--compilation-config" not in plain.argv(plain.profile, "vllm")


def test_decode_sizes_refuse_what_would_undo_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cudagraph_sizes decode needs max_num_seqs"):
        VllmServerConfig(model=MODEL, cudagraph_sizes="decode")
    with pytest.raises(ValueError, match="enforce_eager captures nothing"):
        VllmServerConfig(model=MODEL, cudagraph_sizes="decode", max_num_seqs=4,
                         enforce_eager=True)
    srv = _server(tmp_path, max_num_seqs=4, cudagraph_sizes="decode",
                  extra_args=["--compilation-config", '{"mode": 3}'])
    with pytest.raises(UserError) as e:
        srv.argv(srv.profile, "vllm")
    assert e.value.one_line().startswith(
        "extra_args: --compilation-config would override cudagraph_sizes decode")


# -- recorded vLLM 0.26.0 logs ------------------------------------------------------------------


def test_phases_of_real_cold_and_warm_starts() -> None:
    cold, warm = _logged("draft"), _logged("draft-cache-hit")
    # two modules (backbone, draft_model) log 'torch.compile took'; their sum is vLLM's total
    assert cold.torch_compile_s == cold.compile_s == 54.65
    assert warm.torch_compile_s == warm.compile_s == 7.42
    assert (cold.engine_init_s, cold.graph_capture_s, cold.compile_cache) == (77.45, 6, "miss")
    assert (warm.engine_init_s, warm.graph_capture_s, warm.compile_cache) == (17.45, 4, "hit")
    assert startup_log.cache_dir_of(warm.lines["compile_cache_dir"]) == \
        "/root/.cache/vllm/torch_compile_cache/74ebf54c6c/rank_0_0/draft_model"


def test_phases_of_a_real_start_of_the_mtp_target() -> None:
    # the Qwen3.5 MTP target, n = 2, the machine's third start (round 3 on the H200): its
    # first forward passes (the profiling run) outlast torch.compile, as the gated delta-net's
    # Triton kernels compile again in each configuration's cache folder
    f = _logged("mtp-q35")
    assert (f.engine_init_s, f.compile_s, f.torch_compile_s) == (153.51, 38.73, 38.74)
    assert f.profile_run_s == 84.67  # 84.35 s the target's, 0.32 s the MTP drafter's
    assert f.graph_capture_s == 5 and f.compile_cache == "miss"
    assert f.compile_cache_modules == {"backbone": "miss", "eagle_head": "miss"}
    assert "num_spec_tokens=2" in (f.speculative_config or "")


# -- the compile cache with the stand-in --------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cbcache"
    monkeypatch.setenv("CROSSBENCH_CACHE", str(root))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv(startup_cut.COMPILE_CACHE_ENV, raising=False)  # conftest sets it
    return root


def _start(srv: VllmServer) -> dict[str, Any]:
    srv.start()
    try:
        srv.wait_ready(60)
        return srv.props()
    finally:
        srv.stop()


def test_second_start_is_warm_and_recorded(tmp_path: Path, cache: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    cfg = {"binary": str(binary), "max_num_seqs": 8, "cudagraph_sizes": "decode",
           "spec": {"type": "ngram", "n": 2}}
    first = _start(_server(tmp_path, **cfg))["startup_cut"]
    second = _start(_server(tmp_path, **cfg))["startup_cut"]
    key = first["build_key"]
    assert key.startswith("0.26.0-") and first["cache_root"] == \
        str(cache / "vllm-compile" / key)
    assert (first["start"], first["entries_before"]) == ("cold", 0)
    assert (second["start"], second["entries_before"]) == ("warm", 1)
    assert first["capture_sizes"] == first["logged_capture_sizes"] == [1, 2, 4, 8, 16, 24]
    for rec in (first, second):
        assert rec["ready_s"] > 0 and rec["engine_init_s"] is not None
        assert rec["torch_compile_s"] is not None and rec["compile_cache_hit"] in ("miss",
                                                                                   "hit")
    starts = startup_cut.read_index(Path(first["cache_root"]))
    assert [s["start"] for s in starts] == ["cold", "warm"]
    assert starts[0]["model"] == MODEL and starts[0]["cache_dir"].startswith(
        first["cache_root"] + "/torch_compile_cache/")


def test_compile_cache_off_and_vllm(tmp_path: Path, cache: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    off = _server(tmp_path, binary=str(binary), compile_cache="off")
    assert off.base_environment()["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert [_start(off)["startup_cut"]["start"] for _ in range(2)] == ["cold", "cold"]
    own = _server(tmp_path, binary=str(binary), compile_cache="vllm")
    assert "VLLM_CACHE_ROOT" not in own.base_environment()
    chosen = _server(tmp_path, binary=str(binary), env={"VLLM_CACHE_ROOT": "/x/y"})
    assert chosen.base_environment()["VLLM_CACHE_ROOT"] == "/x/y"  # the config's wins


def test_no_executable_no_cache_root(tmp_path: Path, cache: Path) -> None:
    """Reading the environment (the API key's lookup) needs no vLLM on this machine."""
    srv = _server(tmp_path, binary=str(tmp_path / "missing" / "vllm"))
    assert "VLLM_CACHE_ROOT" not in srv.base_environment()


def test_pack_unpack_makes_the_next_machine_warm(tmp_path: Path, cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    cfg = {"binary": str(binary), "max_num_seqs": 2}
    first = _start(_server(tmp_path, **cfg))["startup_cut"]
    runner = CliRunner()
    out = tmp_path / "cc.tar.gz"
    res = runner.invoke(cli, ["engines", "compile-cache", "pack", "--binary", str(binary),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    listed = runner.invoke(cli, ["engines", "compile-cache", "list"])
    row = json.loads(listed.stdout.splitlines()[0])
    assert row["build_key"] == first["build_key"] and row["models"] == [MODEL]
    # the next machine: another crossbench cache, the same engine build
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "machine2"))
    res = runner.invoke(cli, ["engines", "compile-cache", "unpack", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(tmp_path / "machine2" / "vllm-compile" /
                                     first["build_key"])
    again = _start(_server(tmp_path, **cfg))["startup_cut"]
    assert (again["start"], again["compile_cache_hit"]) == ("warm", "hit")
    res = runner.invoke(cli, ["engines", "compile-cache", "unpack", str(out)])
    assert "0 entries added, 1 already there" in res.output


def test_a_pack_carries_vllms_model_class_infos_beside_its_entries(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's model class infos (VLLM_CACHE_ROOT/modelinfos, one JSON per class) travel in
    the pack, so the next machine's first start of an architecture skips vLLM's inspection
    subprocess; they are not compile entries (a start's cold or warm stays its
    compilation's), and one the next machine holds already is kept, not overwritten."""
    binary = write_launcher(tmp_path / "vllm", *FAST)
    first = _start(_server(tmp_path, binary=str(binary), max_num_seqs=2))["startup_cut"]
    root = Path(first["cache_root"])
    entries = startup_cut.cache_entries(root)
    infos = root / startup_cut.MODELINFOS
    infos.mkdir()
    eagle = "vllm-model_executor-models-llama_eagle3-Eagle3LlamaForCausalLM.json"
    qwen = "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json"
    (infos / eagle).write_text('{"hash": "e1", "modelinfo": {}}')
    (infos / qwen).write_text('{"hash": "q1", "modelinfo": {}}')
    assert startup_cut.cache_entries(root) == entries  # not an entry
    out = tmp_path / "cc.tar.gz"
    manifest = startup_cut.pack(root, out, first["build_key"])
    assert manifest["modelinfos"] == sorted([eagle, qwen])
    assert manifest["entries"] == entries
    base = tmp_path / "machine2"
    held = startup_cut.cache_root(first["build_key"], base) / startup_cut.MODELINFOS
    held.mkdir(parents=True)
    (held / qwen).write_text('{"hash": "q2", "modelinfo": {}}')  # the next machine's own
    _, got, added = startup_cut.unpack(out, base)
    assert added == entries  # the compile entries, and only they, count as added
    assert (got / startup_cut.MODELINFOS / eagle).read_text() == '{"hash": "e1", "modelinfo": {}}'
    assert (got / startup_cut.MODELINFOS / qwen).read_text() == '{"hash": "q2", "modelinfo": {}}'


def test_a_pack_lists_its_starts_with_entry_module_and_gpu(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`compile-cache list --pack` reads a pack's start index without unpacking: each start
    with the entry and module it used, cold or warm, and the GPU it ran on (an entry serves
    only the GPU model that made it), so a lease can tell what it carries warm."""
    from crossbench import host

    monkeypatch.setattr(host, "gpu_names", lambda: ["NVIDIA H200"])
    binary = write_launcher(tmp_path / "vllm", *FAST)
    first = _start(_server(tmp_path, binary=str(binary), max_num_seqs=2))["startup_cut"]
    _start(_server(tmp_path, binary=str(binary), max_num_seqs=2))
    out = tmp_path / "cc.tar.gz"
    runner = CliRunner()
    res = runner.invoke(cli, ["engines", "compile-cache", "pack", "--binary", str(binary),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["engines", "compile-cache", "list", "--pack", str(out)])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)
    entries = startup_cut.cache_entries(Path(first["cache_root"]))
    assert listed["build_key"] == first["build_key"] and listed["entries"] == entries
    assert [(s["start"], s["gpus"]) for s in listed["starts"]] == [
        ("cold", ["NVIDIA H200"]), ("warm", ["NVIDIA H200"])]
    (entry,) = {s["entry"] for s in listed["starts"]}
    assert entry in entries and {s["module"] for s in listed["starts"]} == {"backbone"}
    assert startup_cut.read_pack_manifest(out)["gpus"] == ["NVIDIA H200"]
    # a pack cut into parts must be joined first, and the error says how
    (tmp_path / "cc.tar.gz.p0of2").write_bytes(b"x")
    res = runner.invoke(cli, ["engines", "compile-cache", "list", "--pack",
                              str(tmp_path / "cc.tar.gz.x")])
    assert res.exit_code != 0 and "does not exist" in res.output
    assert "give a file made by" in res.output
    out.rename(tmp_path / "cc.tar.gz.p1of2")
    res = runner.invoke(cli, ["engines", "compile-cache", "list", "--pack", str(out)])
    assert f"join its parts first: cat {out}.p*of* > {out}" in res.output


def test_unpack_refuses_what_is_not_a_pack(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("../evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(data))
    res = CliRunner().invoke(cli, ["engines", "compile-cache", "unpack", str(bad)])
    assert res.exit_code == 2
    assert res.output == (f"crossbench: error: compile-cache: {bad} is not a compile-cache "
                          "pack (no crossbench-compile-cache.json) (fix: pass a file made by "
                          "`crossbench engines compile-cache pack`)\n")
    # a pack whose member climbs out of the root is not extracted there
    sneaky = tmp_path / "sneaky.tar.gz"
    with tarfile.open(sneaky, "w:gz") as tar:
        for name, body in (("crossbench-compile-cache.json", json.dumps(
                {"format": 1, "build_key": "0.26.0-abc", "entries": []}).encode()),
                ("torch_compile_cache/../../../escaped", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    with pytest.raises(UserError, match="would land outside"):
        startup_cut.unpack(sneaky, tmp_path / "base")
    assert not (tmp_path / "escaped").exists()


# -- confounds ----------------------------------------------------------------------------------


def _view(**over: Any) -> dict[str, Any]:
    v = {"engine.kind": "vllm", "engine.version": "0.26.0", "server.max_num_seqs": 16,
         "load.temperature": 0.0}
    v.update({k.replace("__", "."): x for k, x in over.items()})
    return v


def test_a_pair_differing_in_capture_sizes_is_confounded() -> None:
    a, b = _view(server__cudagraph_sizes="decode"), _view(server__cudagraph_sizes="default")
    found = check_pair(a, b, labels=("spec", "baseline"))
    hits = [f for f in found if f.rule == "vllm-cudagraph-sizes"]
    assert [f.severity for f in hits] == ["confounding"]
    assert hits[0].message.startswith("spec captured CUDA graphs 'decode', baseline 'default'")
    assert [x.kind for x in diff(a, b).differences] == [Kind.CONFOUNDING]
    both = _view(server__cudagraph_sizes="decode")
    assert not [f for f in check_pair(both, dict(both)) if f.rule == "vllm-cudagraph-sizes"]
    # where the compiled code came from is not a setting of the measurement
    c = diff(_view(server__compile_cache="crossbench", **{
        "server_props__startup_cut__ready_s": 12.0, "engine__startup__torch_compile_s": 4.7}),
        _view(server__compile_cache="off", **{
            "server_props__startup_cut__ready_s": 80.0,
            "engine__startup__torch_compile_s": 54.6}))
    assert {x.kind for x in c.differences} == {Kind.BENIGN} and not c.confounded


# -- the benchmark ------------------------------------------------------------------------------


def _bench() -> Any:
    return load_benchmark("vllm_startup_cut.py")


def test_benchmark_refuses_without_a_gpu(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "gpu_present", lambda: False)
    assert bench.main(["--config", "cell.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm_startup_cut: no GPU on this host")


def test_benchmark_verdict_against_the_spread() -> None:
    bench = _bench()

    def start(variant: str, kind: str, ready: float, rate: float) -> dict[str, Any]:
        return {"variant": variant, "start": kind, "ready_s": ready, "engine_init_s": None,
                "torch_compile_s": None, "compile_s": None, "graph_capture_s": None,
                "decode_tok_s": rate}

    starts = [start("default", "cold", 120, 100.0), start("default", "warm", 60, 104.0),
              start("cut", "cold", 110, 101.0), start("cut", "warm", 38, 103.5)]
    s = bench.summarize(starts)
    assert s["decode_verdict"]["verdict"] == "unchanged"
    assert s["decode_verdict"]["spread_tok_s"] == pytest.approx(4.0)
    assert s["warm_target"] == {"target_s": 40.0, "cut_warm_ready_max_s": 38, "met": True}
    starts[2]["decode_tok_s"], starts[3]["decode_tok_s"] = 120.0, 121.0
    assert bench.summarize(starts)["decode_verdict"]["verdict"] == "changed"


def test_benchmark_runs_on_the_standin_round_by_round(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    out = tmp_path / "out"
    common = ["--standin", "--concurrency", "2", "--rounds", "2", "--requests", "2",
              "--max-tokens", "8", "--out", str(out)]
    assert bench.main([*common, "--round", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("STAND-IN (crossbench's vLLM stand-in, not vLLM)")
    rec = json.loads((out / "startup_cut.json").read_text())
    assert rec["standin"] is True
    got = {(s["variant"], s["intended"]): s for s in rec["starts"]}
    assert {k: s["start"] for k, s in got.items()} == {
        ("default", "cold"): "cold", ("default", "warm"): "warm",
        ("cut", "cold"): "cold", ("cut", "warm"): "warm"}
    assert got["default", "warm"]["logged_capture_sizes"] == [1, 2, 4]
    assert got["cut", "warm"]["logged_capture_sizes"] == [1, 2]
    assert all(s["n_ok"] == 2 and s["kv_cache_tokens"] == 81_920 for s in rec["starts"])
    assert bench.main([*common, "--round", "1"]) == 0  # a later device command
    capsys.readouterr()
    assert bench.main(["--report", "--out", str(out)]) == 0
    summary = json.loads((out / "startup_cut.json").read_text())["summary"]
    assert summary["decode"]["cut"]["n"] == summary["decode"]["default"]["n"] == 4
    assert summary["phases"]["cut/warm"]["ready_s"]["n"] == 2
    assert summary["decode_verdict"]["verdict"] in ("unchanged", "changed")


def test_compile_cache_env_moves_every_build_folder(tmp_path: Path, cache: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    other = tmp_path / "bigdisk"
    monkeypatch.setenv(startup_cut.COMPILE_CACHE_ENV, str(other))
    first = _start(_server(tmp_path, binary=str(binary), max_num_seqs=2))["startup_cut"]
    assert first["cache_root"] == str(other / first["build_key"])
    assert startup_cut.cache_entries(other / first["build_key"])
    assert not (cache / "vllm-compile").exists()
    listed = CliRunner().invoke(cli, ["engines", "compile-cache", "list"])
    assert [json.loads(r)["path"] for r in listed.stdout.splitlines()] == \
        [str(other / first["build_key"])]


def test_a_cache_cut_into_parts_makes_the_next_lease_warm(tmp_path: Path, cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The leases' path (benchmarks/study/carry.py, run.sh steps 4c and 7, `land`): the
    pack cut into parts in a call's return folder, kept here, joined on the next machine,
    unpacked, and the same configuration starts warm there (the stand-in's cache)."""
    carry = load_benchmark("study/carry.py", "study_carry_cut")
    binary = write_launcher(tmp_path / "vllm", *FAST)
    cfg = {"binary": str(binary), "max_num_seqs": 2}
    first = _start(_server(tmp_path, **cfg))["startup_cut"]
    assert first["start"] == "cold"
    pack = tmp_path / "cc-out" / "vllm-compile.tgz"
    res = CliRunner().invoke(cli, ["engines", "compile-cache", "pack", "--binary", str(binary),
                                   "--out", str(pack)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "OUT"
    out.mkdir()
    part_bytes = max(1, pack.stat().st_size // 3 + 1)
    parts = carry.cut(pack, out, part_bytes=part_bytes)
    assert len(parts) == 3
    kept = carry.keep(out, tmp_path / "repo" / ".carry" / "vllm-compile")
    # kept in the folder of the model the stand-in served (the next lease's pick reads it)
    assert carry.models(kept) and kept[0].parent.name == carry.set_key(carry.models(kept))
    device = tmp_path / "cc-in"
    device.mkdir()
    for p in kept:
        (device / p.name).write_bytes(p.read_bytes())
    joined, waiting = carry.join(device)
    assert waiting == [] and joined[0].read_bytes() == pack.read_bytes()
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "machine2"))
    res = CliRunner().invoke(cli, ["engines", "compile-cache", "unpack", str(joined[0])])
    assert res.exit_code == 0, res.output
    again = _start(_server(tmp_path, **cfg))["startup_cut"]
    assert (again["start"], again["compile_cache_hit"]) == ("warm", "hit")
    assert again["cache_root"] == str(tmp_path / "machine2" / "vllm-compile" /
                                      first["build_key"])
