"""benchmarks/study/carry.py: the vLLM compile cache cut into parts a device call can return,
kept between leases, and joined again on the next machine (byte for byte, or not at all)."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from bench_loader import load_benchmark


@pytest.fixture(scope="module")
def carry() -> ModuleType:
    return load_benchmark("study/carry.py", "study_carry_test")


def _noise(n: int) -> bytes:
    """Incompressible bytes, the same on every run."""
    return random.Random(n).randbytes(n)


def _pack(path: Path, payload: bytes) -> Path:
    """A gzip tar holding ``payload`` (random bytes do not compress: the size is known)."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("torch_compile_cache/abc/artifact")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return path


def test_cut_keep_join_round_trip(carry: ModuleType, tmp_path: Path) -> None:
    pack = _pack(tmp_path / "vllm-compile.tgz", _noise(25_000))
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "run.tgz").write_bytes(b"r" * 1000)
    parts = carry.cut(pack, out, part_bytes=10_000, room_bytes=60_000, room_files=8)
    assert [p.name for p in parts] == ["vllm-compile.tgz.p0of3", "vllm-compile.tgz.p1of3",
                                       "vllm-compile.tgz.p2of3"]
    assert all(p.stat().st_size <= 10_000 for p in parts)
    assert b"".join(p.read_bytes() for p in parts) == pack.read_bytes()
    kept_dir = tmp_path / "repo" / ".carry" / "vllm-compile"
    kept_dir.mkdir(parents=True)
    (kept_dir / "old.tgz.p0of1").write_bytes(b"an earlier lease's pack")
    kept = carry.keep(out, kept_dir)
    assert sorted(p.name for p in kept) == sorted(p.name for p in parts)
    # a pack whose manifest names no model is kept in `unnamed/`; the earlier lease's part,
    # kept in the folder itself as before model folders, went there first and was replaced
    assert [p.name for p in kept_dir.iterdir()] == ["unnamed"]
    assert sorted(p.name for p in (kept_dir / "unnamed").iterdir()) == \
        sorted(p.name for p in parts)
    device = tmp_path / "cc-in"
    device.mkdir()
    for p in kept[:2]:  # the first call carried two parts
        (device / p.name).write_bytes(p.read_bytes())
    joined, waiting = carry.join(device)
    assert joined == [] and waiting == ["vllm-compile.tgz: 2 of 3 parts, waiting for p2of3"]
    (device / kept[2].name).write_bytes(kept[2].read_bytes())
    joined, waiting = carry.join(device)
    assert joined == [device / "vllm-compile.tgz"] and waiting == []
    assert joined[0].read_bytes() == pack.read_bytes()


def test_a_pack_larger_than_a_return_comes_back_over_several_calls(
        carry: ModuleType, tmp_path: Path) -> None:
    """The fits round's cache (65.7 MB) did not fit one call's return (60 MB): each call now
    returns the next parts that fit, and ``keep`` gathers them call by call."""
    pack = _pack(tmp_path / "cc.tgz", _noise(25_000))  # 3 parts of 10,000 bytes or less
    kept_dir = tmp_path / "kept"
    kept_dir.mkdir()
    (kept_dir / "old.tgz.p0of1").write_bytes(b"an earlier lease's pack")
    calls = []
    for i in range(4):
        out = tmp_path / f"call{i}"
        out.mkdir()
        (out / "run.tgz").write_bytes(b"r" * 35_000)  # room for two parts beside it
        calls.append([q.name for q in carry.cut(pack, out, part_bytes=10_000,
                                                room_bytes=60_000, room_files=8)])
        kept = carry.keep(out, kept_dir)
        if i == 0:  # half a set: the carried cache stays until the set is whole
            assert kept == [] and (kept_dir / "old.tgz.p0of1").is_file()
    assert calls == [["cc.tgz.p0of3", "cc.tgz.p1of3"], ["cc.tgz.p2of3"], [], []]
    assert carry.left(pack) == 0
    assert sorted(p.name for p in (kept_dir / "unnamed").iterdir()) == \
        ["cc.tgz.p0of3", "cc.tgz.p1of3", "cc.tgz.p2of3"]
    joined, waiting = carry.join(kept_dir / "unnamed")
    assert waiting == [] and joined[0].read_bytes() == pack.read_bytes()


def test_cut_writes_nothing_without_room(carry: ModuleType, tmp_path: Path) -> None:
    pack = _pack(tmp_path / "cc.tgz", _noise(25_000))
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "run.tgz").write_bytes(b"r" * 55_000)
    assert carry.cut(pack, out, part_bytes=10_000, room_bytes=60_000) == []  # bytes
    assert carry.left(pack) == 3
    (out / "run.tgz").write_bytes(b"r")
    for i in range(7):
        (out / f"f{i}").write_bytes(b"x")
    assert carry.cut(pack, out, part_bytes=10_000, room_bytes=60_000, room_files=8) == []
    assert sorted(p.name for p in out.iterdir()) == [*(f"f{i}" for i in range(7)), "run.tgz"]


def test_join_refuses_parts_that_are_not_a_pack(carry: ModuleType, tmp_path: Path) -> None:
    pack = _pack(tmp_path / "cc.tgz", _noise(20_000))
    (tmp_path / "x").mkdir()
    parts = carry.cut(pack, tmp_path / "x", part_bytes=10_000)
    parts[1].write_bytes(b"\0" * parts[1].stat().st_size)  # damaged on the way
    joined, waiting = carry.join(tmp_path / "x")
    assert joined == [] and len(waiting) == 1
    assert waiting[0].startswith(f"cc.tgz: its {len(parts)} parts do not join into a gzip tar")
    assert not (tmp_path / "x" / "cc.tgz").exists()


def test_keep_leaves_the_carried_cache_when_no_whole_set_came(carry: ModuleType,
                                                              tmp_path: Path) -> None:
    files_at, dest = tmp_path / "files", tmp_path / "dest"
    files_at.mkdir()
    dest.mkdir()
    (dest / "cc.tgz.p0of1").write_bytes(b"kept")
    (files_at / "run.tgz").write_bytes(b"r")
    (files_at / "cc.tgz.p0of2").write_bytes(b"half")
    assert carry.keep(files_at, dest) == []
    assert (dest / "cc.tgz.p0of1").read_bytes() == b"kept"


def test_cli_says_what_it_did(carry: ModuleType, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    pack = _pack(tmp_path / "cc.tgz", b"small")
    out = tmp_path / "OUT"
    out.mkdir()
    assert carry.main(["out", str(pack), str(out)]) == 0
    said = capsys.readouterr().out.strip()
    assert said == (f"cc.tgz: {pack.stat().st_size} bytes; cc.tgz.p0of1 returned; every part "
                    "returned")
    assert carry.main(["keep", str(out), str(tmp_path / "kept")]) == 0
    assert capsys.readouterr().out.strip() == \
        f"kept 1 compile-cache part(s) in {tmp_path / 'kept' / 'unnamed'}"
    assert carry.main(["join", str(tmp_path / "kept" / "unnamed")]) == 0
    assert capsys.readouterr().out.strip() == f"joined {tmp_path / 'kept' / 'unnamed' / 'cc.tgz'}"


def test_parts_of_two_cuts_are_never_joined(carry: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "cc.tgz.p0of2").write_bytes(b"a")
    (tmp_path / "cc.tgz.p1of2").write_bytes(b"b")
    (tmp_path / "cc.tgz.p0of1").write_bytes(b"c")
    joined, waiting = carry.join(tmp_path)
    assert joined == [] and waiting == ["cc.tgz: parts of cuts into different numbers of "
                                        "parts (cc.tgz.p0of1, cc.tgz.p0of2, cc.tgz.p1of2): "
                                        "not joined"]
    assert carry.keep(tmp_path, tmp_path / "kept") == []


def test_waiting_names_the_sets_that_lack_parts(carry: ModuleType, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert carry.waiting(tmp_path / "none") == [] and carry.main(["waiting", str(tmp_path)]) == 0
    (tmp_path / "cc.tgz.p0of3").write_bytes(b"a")
    (tmp_path / "cc.tgz.p2of3").write_bytes(b"c")
    assert carry.main(["waiting", str(tmp_path)]) == 1
    assert capsys.readouterr().out.strip() == "cc.tgz: 2 of 3 parts"
    (tmp_path / "cc.tgz.p1of3").write_bytes(b"b")
    assert carry.waiting(tmp_path) == []


def _run_sh_block(pattern: str) -> str:
    """The lines of benchmarks/study/run.sh that ``pattern`` (multi-line regex) matches, to run
    alone."""
    import re

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "study" / "run.sh").read_text()
    m = re.search(pattern, text, re.S | re.M)
    assert m is not None, pattern
    return m.group(0)


def _bg_job_block() -> str:
    """run.sh's bg_code and bg_job, which every background job of a test's script runs
    through."""
    return _run_sh_block(r"^bg_code\(\) \{.*?^\}\nbg_job\(\) \{.*?^\}\n")


def _pack_block(cc_out: Path, kc_out: Path | None = None) -> str:
    """run.sh's step-7 packing, run alone: RKEY, pack_cache, cc_pack and kc_pack, their
    device folders moved to ``cc_out`` and ``kc_out``."""
    block = (_run_sh_block(r"^RKEY=.*?\n") + _run_sh_block(r"^pack_cache\(\) \{.*?^\}\n")
             + _run_sh_block(r"^cc_pack\(\) \{.*?^\}\n")
             + _run_sh_block(r"^kc_pack\(\) \{.*?^\}\n"))
    return block.replace("/tmp/cc-out", str(cc_out)).replace("/tmp/kc-out",
                                                             str(kc_out or cc_out))


def test_run_sh_holds_the_round_while_the_carried_cache_lacks_parts(tmp_path: Path) -> None:
    """run.sh's cc_ready (step 5), run alone: a round does not start while some of the
    compile cache's parts have come and others not (it would run cold), unless CC_COLD=1 or
    the round has started already."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    cc_in, kc_in, log = tmp_path / "cc-in", tmp_path / "kc-in", tmp_path / "log"
    cc_in.mkdir()
    log.mkdir()
    script = _run_sh_block(r"^cc_ready\(\) \{\n.*?^\}\n").replace(
        "/tmp/cc-in", str(cc_in)).replace("/tmp/kc-in", str(kc_in)) + \
        'say() { echo "$*"; }\ncc_ready && echo READY\n'

    def ready(**env: str) -> str:
        return subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True,
                              env={"PATH": os.environ["PATH"], "LOG": str(log), "ROUND": "x",
                                   **env}).stdout

    assert ready() == "READY\n"  # no cache carried: the round starts
    (cc_in / "cc.tgz.p0of2").write_bytes(b"a")
    said = ready()
    assert "READY" not in said and "(cc.tgz: 1 of 2 parts)" in said and "CC_COLD=1" in said
    assert ready(CC_COLD="1") == "READY\n"
    (cc_in / "cc.tgz.p1of2").write_bytes(b"b")
    assert ready() == "READY\n"
    # SGLang's kernel cache holds the start the same way (kc-in), and CC_COLD=1 starts it
    kc_in.mkdir()
    (kc_in / "sglang-kernels.tgz.p2of3").write_bytes(b"c")
    said = ready()
    assert "READY" not in said and "(sglang-kernels.tgz: 1 of 3 parts)" in said
    assert ".carry/sglang-kernels/" in said and "CC_COLD=1" in said
    assert ready(CC_COLD="1") == "READY\n"
    (log / "round.started").touch()
    assert ready() == "READY\n"


def _sized(path: Path, size: int) -> Path:
    """A file of ``size`` bytes (sparse: nothing is written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def test_calls_fill_each_call_up_to_the_carry_limit(carry: ModuleType, tmp_path: Path) -> None:
    """A lease's carry lists: the first call the wheels, the source and pack.json; then the
    pack's parts and the compile cache's, as many a call as fit beside the tree, every call
    under the limit and every part carried exactly once, in order."""
    mb = 1_000_000
    whl = _sized(tmp_path / ".whl" / "a.whl", 3 * mb)
    src = _sized(tmp_path / "src.tgz", 12 * mb)
    meta = _sized(tmp_path / "pack" / "pack.json", 50_000)
    pack = [_sized(tmp_path / "pack" / f"payload.tar.part00{k}", 20 * mb) for k in range(3)]
    cache = [_sized(tmp_path / "cc" / f"vllm-compile.tgz.p{k}of4", 12 * mb) for k in range(4)]
    limit = 66 * mb
    plan = carry.calls(44 * mb, [tmp_path / ".whl", src], [meta], pack + cache, limit)
    assert plan[0] == [tmp_path / ".whl", src, meta]
    assert [q for c in plan[1:] for q in c if q != meta] == pack + cache
    assert all(meta in c for c in plan)
    assert all(44 * mb + sum(carry._size(q) for q in c) <= limit for c in plan)
    # 44 + 20 fits, 44 + 20 + 12 does not; two 12 MB cache parts do not fit together either
    assert [len(c) - 1 for c in plan[1:]] == [1, 1, 1, 1, 1, 1, 1]
    roomy = carry.calls(30 * mb, [whl], [meta], pack + cache, limit)  # a smaller tree
    assert roomy[0] == [whl, meta, pack[0]]  # a part rides with the first call where it fits
    assert [[q.name for q in c[1:]] for c in roomy[1:]] == [
        ["payload.tar.part001"], ["payload.tar.part002", "vllm-compile.tgz.p0of4"],
        ["vllm-compile.tgz.p1of4", "vllm-compile.tgz.p2of4"], ["vllm-compile.tgz.p3of4"]]
    with pytest.raises(ValueError, match="part002.*does not fit"):
        carry.calls(44 * mb, [whl], [meta], [*pack[:2], _sized(pack[2], 23 * mb)], limit)
    assert carry.calls(44 * mb, [whl], [meta], [], limit) == [[whl, meta]]


def test_calls_cli_reads_the_tree_git_would_copy(tmp_path: Path) -> None:
    """`carry.py calls` in a checkout: the tree is its tracked and unignored files, so a
    planned call is never over the limit for want of counting a new example."""
    import subprocess
    import sys

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".carry/\n.whl/\n")
    _sized(repo / "examples" / "a.zip", 5_000_000)  # untracked, not ignored: it travels
    _sized(repo / ".carry" / "vllm-0.26.0" / "pack.json", 1000)
    _sized(repo / ".carry" / "vllm-0.26.0" / "payload.tar.part000", 35_000_000)
    _sized(repo / ".carry" / "vllm-0.26.0" / "payload.tar.part001", 35_000_000)
    _sized(repo / ".whl" / "a.whl", 1000)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "study" / "carry.py"
    r = subprocess.run([sys.executable, str(script), "calls"], cwd=repo, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    tree = 5_000_000 + len(".carry/\n.whl/\n")
    assert lines[0].startswith(f"tree {tree} bytes; 2 calls")
    assert lines[1] == (f'call 1 ({tree + 35_002_000} bytes): ".whl", '
                        '".carry/vllm-0.26.0/pack.json", ".carry/vllm-0.26.0/payload.tar.part000"')
    assert lines[2] == (f'call 2 ({tree + 35_001_000} bytes): ".carry/vllm-0.26.0/pack.json", '
                        '".carry/vllm-0.26.0/payload.tar.part001"')
    assert len(lines) == 3


def test_run_sh_packs_again_after_a_chained_round(tmp_path: Path) -> None:
    """Step 7's cc_pack, run alone with a stand-in `cb`: the compile cache is packed once
    after the lease's first round ends; a round chained after that pack (another ROUND on the
    same machine) packs again under the next name, every entry so far, and says so; a failed
    pack leaves the last good one to return."""
    import os
    import subprocess
    import time

    out, log = tmp_path / "cc-out", tmp_path / "log"
    log.mkdir()
    script = ('say() { echo "$*"; }\n'
              'cb() { [ -n "${FAIL:-}" ] && { echo "pack failed" >&2; return 1; }; '
              'echo "round $ROUND" > "${@: -1}"; }\n'
              + _pack_block(out) + 'cc_pack\necho "CC_PACK=$CC_PACK"\n')

    def call(round_: str, **env: str) -> list[str]:
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              env={"PATH": os.environ["PATH"], "LOG": str(log),
                                   "ROUND": round_, "vprefix": "/x/", **env}
                              ).stdout.splitlines()

    (log / "matrix-rounda.exit").write_text("matrix_exit=0\n")
    assert call("a") == [f"CC_PACK={out}/vllm-compile.tgz"]  # the first pack, said nothing
    assert call("a") == [f"CC_PACK={out}/vllm-compile.tgz"]  # packed once
    time.sleep(0.05)
    (log / "matrix-roundb.exit").write_text("matrix_exit=0\n")  # b ended after the pack
    assert call("b", FAIL="1") == ["compile cache not packed: pack failed",
                                   f"CC_PACK={out}/vllm-compile.tgz"]
    said = call("b")
    assert said == ["compile cache: round b ended after vllm-compile.tgz was packed: packed "
                    "again as vllm-compile-2.tgz (every entry); vllm-compile.tgz's unsent "
                    "parts are dropped", f"CC_PACK={out}/vllm-compile-2.tgz"]
    assert (out / "vllm-compile-2.tgz").read_text() == "round b\n"
    assert call("b") == [f"CC_PACK={out}/vllm-compile-2.tgz"]


QWEN3 = "/work/main/.cbcache/fixtures/qwen3-8b-seed0-v1/hf-target"
"""A served model as a device pack's manifest names it (its machine's cache root)."""
MOE = "/root/.cache/crossbench/fixtures/qwen3-8b-seed0-v1/moe-target/hf"


def _pack_of(path: Path, manifest_name: str, manifest: dict[str, Any], entry: str,
             payload: bytes) -> Path:
    """A cache pack as `crossbench engines compile-cache|kernel-cache pack` writes one: its
    manifest first, then one entry's file."""
    import json

    with tarfile.open(path, "w:gz") as tar:
        for name, data in ((manifest_name, json.dumps(manifest).encode()), (entry, payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _made(path: Path, stamp: str, payload: bytes, models: tuple[str, ...] = (QWEN3,)) -> Path:
    """A compile-cache pack as `compile-cache pack` writes it: its manifest, then an entry."""
    return _pack_of(path, "crossbench-compile-cache.json",
                    {"format": 1, "build_key": "k", "created": stamp, "models": list(models)},
                    "torch_compile_cache/abc/artifact", payload)


def test_keep_keeps_only_the_newest_pack_in_any_call_order(carry: ModuleType,
                                                           tmp_path: Path) -> None:
    """A chained round's second pack supersedes the first: whichever call order `land` reads
    the lease's folders in, the carried cache ends as the newest whole pack, and a pack older
    than what is carried never replaces it."""
    first = _made(tmp_path / "vllm-compile.tgz", "2026-12-05T22:53:21Z", _noise(30_000))
    second = _made(tmp_path / "vllm-compile-2.tgz", "2026-12-05T23:10:00Z", _noise(40_000))
    calls = []
    for pack in (first, second):
        stage = tmp_path / f"call-{pack.name}"
        stage.mkdir()
        carry.cut(pack, stage, part_bytes=12_000)
        calls.append(stage)
    for order in (calls, calls[::-1]):
        dest = tmp_path / f"dest-{order[0].name}"
        for folder in order:
            carry.keep(folder, dest)
        home = dest / "qwen3-8b-seed0-v1-hf-target"  # the folder of the pack's models
        assert [p.name for p in dest.iterdir()] == [home.name]
        assert sorted(p.name for p in carry.cache_parts(home)) == \
            [f"vllm-compile-2.tgz.p{k}of4" for k in range(4)], order
        joined, _ = carry.join(home)
        assert [j.read_bytes() for j in joined] == [second.read_bytes()]
    assert carry.created(carry.cache_parts(home)) == "2026-12-05T23:10:00Z"


def _lease(carry: ModuleType, tmp_path: Path, pack: Path, dest: Path) -> list[Path]:
    """One lease's pack brought back over its calls and kept."""
    stage = tmp_path / f"call-{pack.name}"
    stage.mkdir()
    carry.cut(pack, stage, part_bytes=12_000)
    return carry.keep(stage, dest)


def test_keep_holds_each_model_sets_pack_beside_the_others(carry: ModuleType,
                                                           tmp_path: Path) -> None:
    """A MoE round carries no pack (none holds its models) and returns one of the MoE target
    only: it is kept beside the Qwen3-8B pack, not over it. A later pack whose models include
    an older pack's replaces it; one of fewer models does not."""
    dest = tmp_path / "kept"
    dest.mkdir()
    for sub in ("legacy", "moe"):
        (tmp_path / sub).mkdir()
    legacy = _made(tmp_path / "legacy" / "vllm-compile.tgz", "2026-12-05T22:53:21Z",
                   _noise(20_000))
    carry.cut(legacy, dest, part_bytes=12_000)  # kept flat, as before model folders
    assert sorted(p.name for p in dest.iterdir()) == ["vllm-compile.tgz.p0of2",
                                                      "vllm-compile.tgz.p1of2"]
    moe = _made(tmp_path / "moe" / "vllm-compile.tgz", "2026-12-06T10:00:00Z", _noise(15_000),
                (MOE,))
    kept = _lease(carry, tmp_path / "moe", moe, dest)
    q3, mo = dest / "qwen3-8b-seed0-v1-hf-target", dest / "qwen3-8b-seed0-v1-moe-target-hf"
    assert {p.parent for p in kept} == {mo}
    assert sorted(p.name for p in dest.iterdir()) == sorted([q3.name, mo.name])
    assert carry.created(carry.cache_parts(q3)) == "2026-12-05T22:53:21Z"  # moved, kept
    assert carry.models(carry.cache_parts(mo)) == {"qwen3-8b-seed0-v1/moe-target/hf"}
    held = carry.held(dest)
    assert sorted(held) == [q3, mo] and held[mo] == carry.cache_parts(mo)
    # a pack of the MoE target alone, older than the one kept: dropped
    older = _made(tmp_path / "older.tgz", "2026-12-06T09:00:00Z", _noise(9_000), (MOE,))
    assert _lease(carry, tmp_path, older, dest) == []
    assert carry.created(carry.cache_parts(mo)) == "2026-12-06T10:00:00Z"
    # a round that carried the Qwen3-8B pack and also served the MoE target: both included
    both = _made(tmp_path / "both.tgz", "2026-12-06T11:00:00Z", _noise(9_000), (QWEN3, MOE))
    kept = _lease(carry, tmp_path, both, dest)
    key = "qwen3-8b-seed0-v1-hf-target+qwen3-8b-seed0-v1-moe-target-hf"
    assert {p.parent.name for p in kept} == {key}
    assert [p.name for p in dest.iterdir()] == [key]
    # a newer pack of the Qwen3-8B target alone leaves the pack of both (it holds more)
    q3_only = _made(tmp_path / "q3.tgz", "2026-12-06T12:00:00Z", _noise(9_000))
    _lease(carry, tmp_path, q3_only, dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted([key, q3.name])


def test_model_tail_and_set_key(carry: ModuleType) -> None:
    assert carry.model_tail(QWEN3) == "qwen3-8b-seed0-v1/hf-target"
    assert carry.model_tail("/models/Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # not a fixture
    assert carry.set_key(set()) == carry.UNNAMED
    many = {f"shape{i}-seed0-v1/hf-target" for i in range(9)}
    assert carry.set_key(many).startswith("models-") and len(carry.set_key(many)) == 19


def test_run_sh_takes_the_carried_parts_from_a_models_folder(tmp_path: Path) -> None:
    """run.sh step 4c, run alone in a checkout: the parts a call carried, kept flat (before
    2026-12-06) or in their models' folder, are gathered in the device's cc-in folder."""
    import os
    import subprocess

    cc_in = tmp_path / "cc-in"
    block = _run_sh_block(r"^carried_parts\(\) \{.*?^\}\n") + \
        _run_sh_block(r"^carried_parts /tmp/cc-in .*?\n.*?\n")
    script = 'say() { echo "$*"; }\n' + block.replace("/tmp/cc-in", str(cc_in))
    repo = tmp_path / "repo"
    (repo / ".carry" / "vllm-compile" / "qwen3-8b-seed0-v1-hf-target").mkdir(parents=True)
    (repo / ".carry" / "vllm-compile" / "qwen3-8b-seed0-v1-hf-target" /
     "vllm-compile.tgz.p1of2").write_bytes(b"second")
    (repo / ".carry" / "vllm-compile" / "old.tgz.p0of1").write_bytes(b"flat")
    r = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]}, check=True)
    assert sorted(p.name for p in cc_in.iterdir()) == ["old.tgz.p0of1",
                                                        "vllm-compile.tgz.p1of2"]
    assert (cc_in / "vllm-compile.tgz.p1of2").read_bytes() == b"second"
    assert r.stdout.splitlines() == ["kept old.tgz.p0of1 (4 bytes)",
                                     "kept vllm-compile.tgz.p1of2 (6 bytes)"]


def test_keep_drops_a_flat_pack_older_than_its_models_folder(carry: ModuleType,
                                                            tmp_path: Path) -> None:
    """Parts kept flat (before model folders) never overwrite a newer pack of the same models
    already in its folder: the flat set is dropped when the next lease is kept."""
    dest = tmp_path / "kept"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    newer = _made(tmp_path / "a" / "vllm-compile.tgz", "2026-12-06T10:00:00Z", _noise(9_000))
    home = dest / "qwen3-8b-seed0-v1-hf-target"
    home.mkdir(parents=True)
    carry.cut(newer, home, part_bytes=12_000)
    older = _made(tmp_path / "b" / "old.tgz", "2026-12-05T10:00:00Z", _noise(8_000))
    carry.cut(older, dest, part_bytes=12_000)  # flat, as before 2026-12-06
    moe = _made(tmp_path / "moe.tgz", "2026-12-06T11:00:00Z", _noise(7_000), (MOE,))
    _lease(carry, tmp_path, moe, dest)
    assert sorted(p.name for p in dest.iterdir()) == [
        "qwen3-8b-seed0-v1-hf-target", "qwen3-8b-seed0-v1-moe-target-hf"]
    assert carry.created(carry.cache_parts(home)) == "2026-12-06T10:00:00Z"


def _late_setup(tmp_path: Path, timing: str, fail: str = "",
                fixtures: tuple[str, ...] = (), running: bool = False,
                **needs: str) -> tuple[Path, str]:
    """run.sh's step 3b and wait_setup, run alone in a folder with a stand-in ``python3`` (it
    logs its arguments and fails where they hold ``fail``): a round chained on a machine whose
    setup wrote ``timing``, the chained round's rounds.yaml ``fixtures`` given as ``fixtures``;
    ``running``: a round runs (the stand-in ``pgrep`` finds one). Returns the log folder and
    what the script printed."""
    import os
    import shlex
    import subprocess

    log, bin_ = tmp_path / "log", tmp_path / "bin"
    log.mkdir(parents=True)
    bin_.mkdir()
    (log / "timing.txt").write_text(timing)
    (log / "setup.done").touch()
    fake = bin_ / "python3"
    fake.write_text(f'#!/bin/bash\necho "$*" >>{tmp_path}/calls.txt\n'
                    f'[[ -n "{fail}" && "$*" == *"{fail}"* ]] && exit 3\nexit 0\n')
    fake.chmod(0o755)
    script = ('say() { echo "$*"; }\nt0=$(date +%s)\n'
              'left() { echo $(( 90 - ($(date +%s) - t0) )); }\n'
              f'pgrep() {{ return {0 if running else 1}; }}\n'
              f'fixtures_args=({" ".join(map(shlex.quote, fixtures))}) '
              f'fixtures_min_gb=({" ".join("0" for _ in fixtures)})\n'
              + _bg_job_block()
              + _run_sh_block(r"^fixture_step\(\) \{.*?^\}\n.*?^fixture_steps\(\) \{.*?^\}\n")
              + _run_sh_block(r"^late_needs\(\) \{.*?\n^late_setup\n")
              + _run_sh_block(r"^wait_setup\(\) \{.*?^\}\n")
              + 'wait_setup && echo READY || echo HELD\n')
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "LOG": str(log), "ROUND": "x",
           "CROSSBENCH_CACHE": str(tmp_path), "TMPDIR": str(tmp_path), "PYTHONPATH": "",
           "need_build": needs.get("build", "0"), "need_drafters": needs.get("drafters", "0")}
    out = subprocess.run(["bash", "-c", script],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    return log, out.stdout


def test_run_sh_makes_what_a_chained_round_needs_and_the_first_setup_did_not(
        tmp_path: Path) -> None:
    """A llama.cpp round chained after a vLLM-only round (the setup wrote build_exit=skipped and
    made no drafters): the build and the drafters are made in the background, and the round
    waits for both; their exits go to timing.txt as late_*."""
    first = "fixtures_exit=0\nbuild_exit=skipped build_s=79\nsetup_exit=0 setup_s=79\n"
    log, said = _late_setup(tmp_path, first, build="1", drafters="1")
    assert said.splitlines()[0] == ("round x needs what this machine's setup did not make "
                                    "(build drafters): made now")
    assert said.splitlines()[-1] == "READY"
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("-m crossbench ") for c in calls)
    assert any("engines install llama.cpp --cuda" in c for c in calls)
    assert any("fixtures make --shape qwen3-8b --drafter eagle3 --drafter dflash" in c
               for c in calls)
    timing = (log / "timing.txt").read_text()
    assert "late_build_exit=0" in timing and "late_drafters_exit=0" in timing
    assert (log / "late-setup.done").is_file()


def test_run_sh_holds_a_chained_round_whose_late_build_failed(tmp_path: Path) -> None:
    first = "build_exit=skipped build_s=79\nsetup_exit=0 setup_s=79\n"
    log, said = _late_setup(tmp_path, first, fail="engines install", build="1")
    assert said.splitlines()[-1] == "HELD"
    assert "round x: not started, its late setup failed (late_build_exit=3" in said
    assert (log / "late-setup.failed").is_file() and not (log / "late-setup.done").exists()


def test_run_sh_starts_no_late_setup_where_the_machine_has_what_the_round_needs(
        tmp_path: Path) -> None:
    first = "build_exit=0 build_s=242\ndrafters_exit=0 drafters_s=150\nsetup_exit=0\n"
    log, said = _late_setup(tmp_path, first, build="1", drafters="1")
    assert said == "READY\n"
    assert not (tmp_path / "calls.txt").exists() and not (log / "late-setup.started").exists()
    vllm_first = first.replace("build_exit=0", "build_exit=skipped")
    _, said = _late_setup(tmp_path / "vllm", vllm_first)  # a vLLM round needs no build
    assert said == "READY\n"


def test_run_sh_makes_a_chained_rounds_fixtures_before_its_drafters(tmp_path: Path) -> None:
    """An SGLang round on the Qwen3-8B pair chained after `sglang-nextn` (whose setup made the
    MTP target's HF folder alone and no drafters): the pair is made late, only it, before the
    drafters, and its exit goes to timing.txt as the setup's fixtures do; `study.py room`
    (which frees the disk of target folders the round does not name) runs before it."""
    first = ('fixtures_exit=0 fixtures="path mtp-target --shape qwen3-8b --format hf" s=169\n'
             "build_exit=skipped build_s=170\nsetup_exit=0 setup_s=170\n")
    log, said = _late_setup(tmp_path, first, drafters="1", fixtures=(
        "path mtp-target --shape qwen3-8b --format hf", "make --shape qwen3-8b --hf"))
    assert said.splitlines() == ["round x needs what this machine's setup did not make "
                                 "(fixtures drafters): made now", "READY"]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls == [f"benchmarks/study/study.py room x --cache {tmp_path}",  # room first
                     "-m crossbench fixtures make --shape qwen3-8b --hf",
                     "-m crossbench fixtures make --shape qwen3-8b --drafter eagle3 "
                     "--drafter dflash"]
    timing = (log / "timing.txt").read_text()
    assert 'fixtures_exit=0 fixtures="make --shape qwen3-8b --hf"' in timing
    assert "late_fixtures_exit=0" in timing and "late_drafters_exit=0" in timing


def test_run_sh_holds_a_chained_round_whose_late_fixture_failed(tmp_path: Path) -> None:
    """A late fixture that fails holds the round, though the drafters after it succeed; a
    fixture the first setup made is not made again."""
    first = ('fixtures_exit=0 fixtures="make --shape qwen3-8b --hf" s=77\n'
             "build_exit=0 build_s=240\nsetup_exit=0 setup_s=240\n")
    log, said = _late_setup(tmp_path, first, fail="mtp-target", fixtures=(
        "make --shape qwen3-8b --hf", "path mtp-target --shape qwen3-8b --format hf"))
    assert said.splitlines()[-1] == "HELD"
    assert "round x: not started, its late setup failed (late_fixtures_exit=1" in said
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls == [f"benchmarks/study/study.py room x --cache {tmp_path}",
                     "-m crossbench fixtures path mtp-target --shape qwen3-8b --format hf"]
    assert 'fixtures_exit=3 fixtures="path mtp-target' in (log / "timing.txt").read_text()


def _setup_step(kept: Path, bin_: Path, log: Path, cache: Path) -> tuple[str, dict[str, str]]:
    """run.sh's step 3 as a script to run alone (``/tmp/cb-src`` moved to ``kept``; the
    source's unpack a stand-in that marks it unpacked) and its environment, ``bin_`` first on
    PATH."""
    import os

    block = _run_sh_block(r"^# 3\. background setup.*?^  say \"background setup started\"\nfi\n")
    script = ('say() { echo "$*"; }\nfixtures_args=("make --shape qwen3-8b --hf")\n'
              'fixtures_min_gb=(1)\n'
              'unpack_llama_source() { echo "unpack $1" >>"$LOG/unpacked.txt"; '
              'mkdir -p "$CROSSBENCH_CACHE/sources/x" && '
              'touch "$CROSSBENCH_CACHE/sources/x/.unpacked"; }\n'
              + _bg_job_block()
              + block.replace("/tmp/cb-src", str(kept)))
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "LOG": str(log), "CROSSBENCH_CACHE":
           str(cache), "need_build": "0", "need_drafters": "0", "need_verify_hf": "0",
           "need_q4": "0", "TMPDIR": str(log.parent), "PYTHONPATH": ""}
    return script, env


def test_run_sh_makes_again_what_the_first_setup_failed_before_the_round(
        tmp_path: Path) -> None:
    """A fixture the machine's first setup failed to make (2026-12-07: `fixtures make` died on
    an import as a call's tree arrived) holds the round until the late setup has made it,
    started by wait_setup itself once the first setup is done."""
    first = ('fixtures_exit=1 fixtures="make --shape qwen3-8b --hf" s=55\n'
             "drafters_exit=0 drafters_s=238\nbuild_exit=skipped build_s=238\n"
             "setup_exit=0 setup_s=238\n")
    log, said = _late_setup(tmp_path, first, drafters="1",
                            fixtures=("make --shape qwen3-8b --hf",))
    assert said.splitlines() == ["round x needs what this machine's setup did not make "
                                 "(fixtures): made now", "READY"]
    assert (tmp_path / "calls.txt").read_text().splitlines() == [
        f"benchmarks/study/study.py room x --cache {tmp_path}",
        "-m crossbench fixtures make --shape qwen3-8b --hf"]
    assert "late_fixtures_exit=0" in (log / "timing.txt").read_text()


def test_run_sh_starts_no_late_setup_while_a_round_runs(tmp_path: Path) -> None:
    """While a round runs, wait_setup lets the call go on to wait for its trials at once, and
    no late setup starts beside it, though the machine lacks what it would make (on
    2026-12-07 one rewrote the draft's folder under a running start)."""
    first = ('fixtures_exit=1 fixtures="make --shape qwen3-8b --hf" s=55\n'
             "build_exit=skipped build_s=238\nsetup_exit=0 setup_s=238\n")
    log, said = _late_setup(tmp_path, first, running=True,
                            fixtures=("make --shape qwen3-8b --hf",))
    assert said == "READY\n"
    assert not (log / "late-setup.started").exists() and not (tmp_path / "calls.txt").exists()


def test_run_sh_background_jobs_run_from_a_copy_of_the_code(tmp_path: Path) -> None:
    """`bg_job` runs a job from a copy of the code made as it starts: a module the checkout
    loses while the job runs (a device call laying its tree over the checkout) still
    imports, the other entries of the checkout resolve through links, and .git stays
    behind."""
    import os
    import subprocess
    import time

    checkout, tmp = tmp_path / "checkout", tmp_path / "tmp"
    (checkout / "crossbench").mkdir(parents=True)
    (checkout / "crossbench" / "__init__.py").write_text("")
    (checkout / "crossbench" / "late.py").write_text("WHERE = __file__\n")
    (checkout / "examples").mkdir()
    (checkout / "examples" / "x.txt").write_text("linked\n")
    (checkout / ".git").mkdir()
    tmp.mkdir()
    job = ("sleep 1; python3 -c 'import crossbench.late as m; print(m.WHERE)'; "
           "cat examples/x.txt; [ -e .git ] && echo has-git || echo no-git")
    script = ('say() { echo "$*"; }\n'
              + _bg_job_block()
              + f'bg_job bash -c "{job}" >{tmp_path}/job.out 2>&1 &\nwait\n')
    proc = subprocess.Popen(["bash", "-c", script], cwd=checkout,
                            env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp),
                                 "PYTHONPATH": str(checkout)})
    time.sleep(0.5)
    (checkout / "crossbench" / "late.py").unlink()  # the tree being laid over the checkout
    assert proc.wait(timeout=30) == 0
    out = (tmp_path / "job.out").read_text().splitlines()
    assert len(out) == 3, out
    assert out[0].startswith(str(tmp / "cb-code.")) and out[0].endswith("crossbench/late.py")
    assert out[1:] == ["linked", "no-git"]


def test_run_sh_setup_waits_for_the_llama_cpp_source(tmp_path: Path) -> None:
    """run.sh's step 3, run alone with a stand-in ``python3``: a call that carries no llama.cpp
    source starts no setup and says what to carry (on 2026-12-06 such a call started a setup
    that waited for one, and the next call's ran beside it); the call that carries it keeps
    it outside the checkout and starts the setup once, which the next call does not start
    again."""
    import subprocess
    import time

    work, log, bin_, cache = (tmp_path / d for d in ("work", "log", "bin", "cache"))
    for d in (work, log, bin_, cache):
        d.mkdir()
    fake = bin_ / "python3"
    fake.write_text(f'#!/bin/bash\necho "$*" >>{tmp_path}/calls.txt\nexit 0\n')
    fake.chmod(0o755)
    kept = tmp_path / "cb-src"
    script, env = _setup_step(kept, bin_, log, cache)

    def call() -> str:
        return subprocess.run(["bash", "-c", script], cwd=work, capture_output=True,
                              text=True, env=env, timeout=60).stdout

    said = call()
    assert "setup waits: no llama.cpp source has come" in said
    assert not (log / "setup.started").exists() and not kept.exists()
    source = work / ".carry" / "llama-cpp-python-0.3.36.src.tgz"
    source.parent.mkdir()
    source.write_bytes(b"source")
    said = call()
    assert "kept the llama.cpp source (6 bytes)" in said
    assert said.splitlines()[-1] == "background setup started"
    assert (kept / source.name).read_bytes() == b"source"
    source.unlink()  # a later call need not carry it again
    deadline = time.monotonic() + 30
    while not (log / "setup.done").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (log / "setup.done").exists()
    assert call() == ""  # started once: nothing to say, nothing started again
    assert (log / "unpacked.txt").read_text() == f"unpack {kept / source.name}\n"
    assert "-m crossbench fixtures make --shape qwen3-8b --hf" in (
        tmp_path / "calls.txt").read_text()


def test_run_sh_joins_the_source_from_parts_carried_over_two_calls(tmp_path: Path) -> None:
    """run.sh's step 3 with the source in parts (carry.split): the first call keeps its part
    and waits, the second keeps the other, joins them with carry.py (checked as a gzip tar)
    and starts the setup on the joined source."""
    import gzip
    import io
    import os
    import subprocess
    import sys
    import tarfile

    work, log, bin_, cache = (tmp_path / d for d in ("work", "log", "bin", "cache"))
    for d in (work, log, bin_, cache):
        d.mkdir()
    fake = bin_ / "python3"  # the real interpreter for carry.py, a stand-in for the rest
    fake.write_text(f'#!/bin/bash\nif [[ "$1" == *carry.py ]]; then exec {sys.executable} '
                    f'"$@"; fi\necho "$*" >>{tmp_path}/calls.txt\nexit 0\n')
    fake.chmod(0o755)
    (work / "benchmarks" / "study").mkdir(parents=True)
    (work / "benchmarks" / "study" / "carry.py").write_text(
        (Path(__file__).resolve().parents[1] / "benchmarks" / "study" / "carry.py").read_text())
    kept = tmp_path / "cb-src"
    script, env = _setup_step(kept, bin_, log, cache)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("llama.cpp/README.md")
        info.size = 3000
        tar.addfile(info, io.BytesIO(os.urandom(3000)))
    whole = gzip.compress(raw.getvalue())
    name = "llama-cpp-python-0.3.36.src.tgz"
    parts = work / ".carry" / f"{name}.parts"
    parts.mkdir(parents=True)
    half = len(whole) // 2

    def call(k: int, data: bytes) -> str:
        for old in parts.iterdir():
            old.unlink()  # a call carries only its own part
        (parts / f"{name}.p{k}of2").write_bytes(data)
        return subprocess.run(["bash", "-c", script], cwd=work, capture_output=True,
                              text=True, env=env, timeout=60).stdout

    said = call(0, whole[:half])
    assert f"kept {name}.p0of2 ({half} bytes)" in said
    assert "waiting for p1of2" in said and "setup waits" in said
    assert not (log / "setup.started").exists()
    said = call(1, whole[half:])
    assert f"joined the llama.cpp source ({len(whole)} bytes)" in said
    assert said.splitlines()[-1] == "background setup started"
    assert (kept / name).read_bytes() == whole


def test_calls_move_the_source_to_the_next_call_when_the_tree_grew(carry: ModuleType,
                                                                   tmp_path: Path) -> None:
    """A tree grown by new examples (53 MB on 2026-12-06) leaves no room for the wheels and
    the source in one call: the source rides in the second call (run.sh's setup waits for it)
    instead of the whole lease being refused; every call stays under the limit."""
    mb = 1_000_000
    whl = _sized(tmp_path / ".whl" / "a.whl", 3 * mb)
    src = _sized(tmp_path / "src.tgz", 12 * mb)
    meta = _sized(tmp_path / "pack" / "pack.json", 40_000)
    pack = [_sized(tmp_path / "pack" / f"payload.tar.part00{k}", 12 * mb) for k in range(2)]
    limit = 66 * mb
    plan = carry.calls(53 * mb, [whl, src], [meta], pack, limit)
    assert plan == [[whl, meta], [src, meta], [meta, pack[0]], [meta, pack[1]]]
    assert all(53 * mb + sum(carry._size(q) for q in c) <= limit for c in plan)
    with pytest.raises(ValueError, match="part000.*does not fit.*cut the pack's parts.*"
                       "--part-mb 9`: 9 MB fit beside the tree"):
        carry.calls(56 * mb, [whl, src], [meta], pack, limit)


def test_a_source_that_fits_no_call_whole_travels_in_parts(carry: ModuleType,
                                                            tmp_path: Path) -> None:
    """A tree of 56 MB leaves 9 whole MB a call: the 12 MB source goes as two parts of the
    compile cache's naming, each in its own call, that `join` puts back byte for byte (and
    checks as a gzip tar); a later cut reuses the parts, a newer source is cut again."""
    import gzip
    import io
    import os
    import tarfile

    mb = 1_000_000
    whl = _sized(tmp_path / ".whl" / "a.whl", 3 * mb)
    src = tmp_path / "llama-cpp-python-0.3.36.src.tgz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = os.urandom(12 * mb)  # incompressible: the gzip stays about 12 MB
        info = tarfile.TarInfo("llama.cpp/blob")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    src.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))
    meta = _sized(tmp_path / "pack" / "pack.json", 40_000)
    limit = 66 * mb
    plan = carry.calls(56 * mb, [whl, src], [meta], [], limit)
    parts = [q for c in plan for q in c if q.name.startswith(src.name + ".p")]
    assert [q.name for q in parts] == [f"{src.name}.p0of2", f"{src.name}.p1of2"]
    assert [q.parent for q in parts] == [tmp_path / f"{src.name}.parts"] * 2
    assert plan == [[whl, meta], [parts[0], meta], [parts[1], meta]]
    assert all(56 * mb + sum(carry._size(q) for q in c) <= limit for c in plan)
    assert max(q.stat().st_size for q in parts) == 9 * mb
    device = tmp_path / "device"
    device.mkdir()
    for q in parts:
        (device / q.name).write_bytes(q.read_bytes())
    joined, waiting = carry.join(device)
    assert waiting == [] and joined == [device / src.name]
    assert joined[0].read_bytes() == src.read_bytes()
    mtime = parts[0].stat().st_mtime_ns
    assert carry.split(src, 9 * mb) == parts and parts[0].stat().st_mtime_ns == mtime
    os.utime(src, (src.stat().st_atime + 10, src.stat().st_mtime + 10))  # a newer source
    assert [q.stat().st_size for q in carry.split(src, 9 * mb)] == [
        9 * mb, src.stat().st_size - 9 * mb]
    assert parts[0].stat().st_mtime_ns != mtime


def test_run_sh_keys_a_rounds_markers_by_its_part(tmp_path: Path) -> None:
    """A round's markers carry its part (`matrix-roundR-partN.exit`), so PART=2 chained after
    PART=1 on one machine is a round of its own (on 2026-12-06 both parts shared one marker
    and the second would not start): step 5's key, and cc_pack packing again once the second
    part has ended after the first part's pack."""
    import os
    import re
    import subprocess
    import time

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "study" / "run.sh").read_text()
    key = re.search(r"^RKEY=(.*)$", text, re.M)
    assert key is not None
    for env, want in (({"ROUND": "r", "PART": "2"}, "r-part2"), ({"ROUND": "r"}, "r")):
        got = subprocess.run(["bash", "-c", f"RKEY={key.group(1)}; echo $RKEY"],
                             capture_output=True, text=True, check=True,
                             env={"PATH": os.environ["PATH"], **env}).stdout.strip()
        assert got == want
    assert "matrix-round$ROUND" not in text and "status-round${ROUND}" not in text
    out, log = tmp_path / "cc-out", tmp_path / "log"
    log.mkdir()
    script = ('say() { echo "$*"; }\ncb() { echo "part $PART" > "${@: -1}"; }\n'
              + _pack_block(out) + 'cc_pack\necho "CC_PACK=$CC_PACK"\n')

    def call(part: str) -> list[str]:
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              env={"PATH": os.environ["PATH"], "LOG": str(log), "ROUND": "r",
                                   "PART": part, "vprefix": "/x/"}).stdout.splitlines()

    (log / "matrix-roundr-part1.exit").write_text("matrix_exit=0\n")
    assert call("1") == [f"CC_PACK={out}/vllm-compile.tgz"]
    time.sleep(0.05)
    (log / "matrix-roundr-part2.exit").write_text("matrix_exit=0\n")
    assert call("2")[-1] == f"CC_PACK={out}/vllm-compile-2.tgz"
    assert (out / "vllm-compile-2.tgz").read_text() == "part 2\n"


def test_run_sh_returns_each_finished_trial_after_return_s(tmp_path: Path) -> None:
    """run.sh's round_wait (step 5), run alone: a call waits while the round runs, and once
    RETURN_S has passed it ends as soon as the journals hold a trial more than the last
    return packed (2026-12-06: an H100 taken back mid-call lost the trials of its last
    minutes); before RETURN_S a new trial does not end it, and the round's end or a spent
    budget end it at once."""
    import os
    import subprocess
    import time

    log, run = tmp_path / "log", tmp_path / "run"
    (run / "step-a").mkdir(parents=True)
    log.mkdir()
    journal = run / "step-a" / "journal.jsonl"
    journal.write_text('{"trial":0}\n{"trial":1}\n')
    (log / "returned-trials").write_text("2\n")
    block = _run_sh_block(r"^finished_trials\(\) \{.*?^round_wait\(\) \{.*?^\}\n")
    script = ('t0=$(date +%s); left() { echo $(( BUDGET - ($(date +%s) - t0) )); }\n' + block
              + 'round_wait\necho "waited $(( $(date +%s) - t0 ))"\nfinished_trials\n')

    def call(budget: int, return_s: int) -> tuple[float, list[str]]:
        start = time.monotonic()
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                             timeout=30, env={"PATH": os.environ["PATH"], "LOG": str(log),
                                              "RUN": str(run), "RKEY": "r", "PACK_S": "0",
                                              "BUDGET": str(budget), "RETURN_S": str(return_s),
                                              "WAIT_POLL_S": "0.1"}).stdout.splitlines()
        return time.monotonic() - start, out

    # (the script's clock counts whole seconds: a wait of N of them lasts more than N - 1)
    took, out = call(budget=3, return_s=0)  # nothing new: waits out the budget
    assert took >= 1.9 and out[-1].strip() == "2"
    journal.write_text(journal.read_text() + '{"trial":2}\n')
    took, out = call(budget=20, return_s=0)  # a trial more than was returned: ends at once
    assert took < 5 and out[-1].strip() == "3"
    took, out = call(budget=20, return_s=3)  # ... but not before RETURN_S
    assert 1.9 <= took < 8
    (log / "returned-trials").write_text("3\n")
    (log / "matrix-roundr.exit").write_text("matrix_exit=0\n")
    took, _ = call(budget=20, return_s=100)  # the round has ended
    assert took < 5


def test_run_sh_packs_run_tgz_while_a_step_has_no_journal_yet(tmp_path: Path) -> None:
    """run.sh's return of a running round (steps 5-6), under the script's own `set -uo
    pipefail`: run.tgz is packed and returned-trials counts the finished trials although the
    round's top folder has no journal and a later step's folder none yet (on 2026-12-07 the
    missing journals made the count's pipeline fail and five calls came back without run.tgz
    while the round ran)."""
    import os
    import subprocess
    import tarfile

    cache, log, out = tmp_path / "cache", tmp_path / "log", tmp_path / "out"
    run = cache / "h200-cross-roundr"
    (run / "step-a").mkdir(parents=True)
    (run / "step-b").mkdir()
    log.mkdir()
    out.mkdir()
    (run / "step-a" / "journal.jsonl").write_text('{"trial":0}\n{"trial":1}\n')
    script = ("set -uo pipefail\nsay() { echo \"$*\"; }\n"
              + _run_sh_block(r"^finished_trials\(\) \{.*?^\}\n")
              + _run_sh_block(r'^if \[ -d "\$RUN" \]; then\n.*?^fi\n') + "echo done\n")
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ["PATH"], "LOG": str(log), "RUN": str(run),
                              "OUT": str(out), "CROSSBENCH_CACHE": str(cache)})
    assert res.stdout.splitlines() == ["done"], res.stdout + res.stderr
    assert (log / "returned-trials").read_text().strip() == "2"
    with tarfile.open(out / "run.tgz") as tar:
        assert "h200-cross-roundr/step-a/journal.jsonl" in tar.getnames()


def test_run_sh_records_the_kernel_caches_each_call(tmp_path: Path) -> None:
    """Every call from the one that starts a round writes kernel-caches.txt into logs.tgz:
    each kernel or compile cache the machine holds (SGLang's JIT cache, Triton's, ...), its
    size and entries; missing ones are left out."""
    import os
    import subprocess

    home, log = tmp_path / "home", tmp_path / "log"
    (home / ".cache" / "tvm-ffi" / "sgl_kernel_jit_a").mkdir(parents=True)
    (home / ".cache" / "tvm-ffi" / "sgl_kernel_jit_a" / "a.so").write_bytes(b"x" * 5000)
    log.mkdir()
    (log / "round.started").touch()
    block = _run_sh_block(r"^\[ -f \"\$LOG/round.started\" \] && for d in .*?"
                          r"^done >\"\$LOG/kernel-caches\.txt\" 2>/dev/null\n")
    subprocess.run(["bash", "-c", block], check=True, timeout=30,
                   env={"PATH": os.environ["PATH"], "HOME": str(home), "LOG": str(log)})
    lines = (log / "kernel-caches.txt").read_text().splitlines()
    assert not [ln for ln in lines if ".triton" in ln or "flashinfer" in ln]  # not there
    (line,) = [ln for ln in lines if "tvm-ffi" in ln]
    size, unit, entries, word, where = line.split()
    assert (unit, entries, word, where) == ("KiB", "1", "entries",
                                            str(home / ".cache" / "tvm-ffi"))
    assert int(size) >= 5


def _gz_tar(path: Path, size: int) -> Path:
    """A gzip tar of one member of ``size`` incompressible bytes."""
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("entry/blob")
        info.size = size
        tar.addfile(info, io.BytesIO(_noise(size)))
    path.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))
    return path


def test_a_kept_compile_cache_is_cut_again_when_the_tree_outgrew_its_parts(
        carry: ModuleType, tmp_path: Path) -> None:
    """A kept compile cache cut into 12 MB parts stops fitting once the tree grows
    (2026-12-06 night: 54.5 MB left 11 MB a call): `recut` cuts the whole set again in place,
    byte for byte, the old parts gone once the new ones are written; a set that fits is left
    as it is; parts that do not join are refused and kept."""
    whole = _gz_tar(tmp_path / "vllm-compile.tgz", 30_000)
    kept = tmp_path / "kept"
    kept.mkdir()
    for q in carry.split(whole, 12_000):
        q.rename(kept / q.name)
    old = carry.cache_parts(kept)
    assert [q.name for q in old] == [f"vllm-compile.tgz.p{k}of3" for k in range(3)]
    assert carry.recut(old, 12_000) == old  # fits: unchanged
    new = carry.recut(old, 7_000)
    assert [q.name for q in new] == [f"vllm-compile.tgz.p{k}of5" for k in range(5)]
    assert carry.cache_parts(kept) == new and max(q.stat().st_size for q in new) <= 7_000
    assert b"".join(q.read_bytes() for q in new) == whole.read_bytes()
    assert sorted(p.name for p in kept.iterdir()) == [q.name for q in new]  # no work left
    new[1].write_bytes(b"damaged")
    with pytest.raises(ValueError, match="do not join into a gzip tar"):
        carry.recut(new, 3_000)
    assert carry.cache_parts(kept) == new
    mb = 1_000_000
    assert carry.part_room(53 * mb, [_sized(tmp_path / "pack.json", 40_000)], 66 * mb) \
        == 12 * mb
    assert carry.part_room(70 * mb, [], 66 * mb) == 0


def _kernels(path: Path, stamp: str, payload: bytes, build: str = "0.5.17-0123456789ab",
             cap: str = "9.0") -> Path:
    """An SGLang kernel-cache pack as `kernel-cache pack` writes it: its manifest, an entry."""
    return _pack_of(path, "crossbench-kernel-cache.json",
                    {"format": 1, "kind": "sglang-kernel-cache", "build_key": build,
                     "compute_cap": cap, "created": stamp, "payload_sha256": "ab" * 32,
                     "caches": {"tvm_ffi": ["m"], "triton": []}},
                    "tvm_ffi/m/m.so", payload)


def test_keep_holds_sglang_kernel_caches_by_build_and_compute_capability(
        carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A call that returns both caches' parts: `keep` takes the vLLM compile cache's only,
    `keep --kernels` SGLang's only, into the folder of its engine build and compute
    capability; a newer pack of that build replaces it, an older one never does, and another
    build's pack is kept beside it."""
    call = tmp_path / "call"
    call.mkdir()
    first = _kernels(tmp_path / "sglang-kernels.tgz", "2026-12-08T10:00:00Z", _noise(30_000))
    carry.cut(first, call, part_bytes=12_000)
    carry.cut(_made(tmp_path / "vllm-compile.tgz", "2026-12-08T10:01:00Z", _noise(5_000)),
              call, part_bytes=12_000)
    vdest, kdest = tmp_path / "vllm-compile", tmp_path / "sglang-kernels"
    kept = carry.keep(call, vdest)
    assert [p.name for p in kept] == ["vllm-compile.tgz.p0of1"]
    assert [p.name for p in vdest.iterdir()] == ["qwen3-8b-seed0-v1-hf-target"]
    assert carry.main(["keep", "--kernels", str(call), str(kdest)]) == 0
    home = kdest / "0.5.17-0123456789ab-sm90"
    assert capsys.readouterr().out == f"kept 3 kernel-cache part(s) in {home}\n"
    assert [p.name for p in kdest.iterdir()] == [home.name]
    assert [p.name for p in carry.cache_parts(home)] == \
        [f"sglang-kernels.tgz.p{k}of3" for k in range(3)]
    assert carry.join(home)[0][0].read_bytes() == first.read_bytes()
    (home / "sglang-kernels.tgz").unlink()
    # a chained round's pack of the same build replaces it; an older one never does
    newer = _kernels(tmp_path / "sglang-kernels-2.tgz", "2026-12-08T11:00:00Z", _noise(9_000))
    (tmp_path / "older").mkdir()
    older = _kernels(tmp_path / "older" / "sglang-kernels.tgz", "2026-12-07T09:00:00Z",
                     _noise(8_000))
    for pack in (newer, older):
        stage = tmp_path / f"call-{pack.parent.name}-{pack.name}"
        stage.mkdir()
        carry.cut(pack, stage, part_bytes=12_000)
        carry.keep(stage, kdest, kernels=True)
    assert [p.name for p in carry.cache_parts(home)] == ["sglang-kernels-2.tgz.p0of1"]
    # another build (another SGLang pack) and another capability: kept beside it
    for build, cap, name in (("0.5.17-ffffffffffff", "9.0", "b"), ("0.5.17-0123456789ab",
                                                                    "8.0", "c")):
        other = _kernels(tmp_path / f"{name}.tgz", "2026-12-08T12:00:00Z", _noise(7_000),
                         build, cap)
        stage = tmp_path / f"call-{name}"
        stage.mkdir()
        (stage / "sglang-kernels.tgz.p0of1").write_bytes(other.read_bytes())
        carry.keep(stage, kdest, kernels=True)
    assert sorted(p.name for p in kdest.iterdir()) == [
        "0.5.17-0123456789ab-sm80", home.name, "0.5.17-ffffffffffff-sm90"]
    assert carry.created(carry.cache_parts(home)) == "2026-12-08T11:00:00Z"
    assert carry.kernel_key(carry.cache_parts(home)) == home.name
    assert [p.name for p in vdest.iterdir()] == ["qwen3-8b-seed0-v1-hf-target"]  # untouched


def test_run_sh_carries_sglangs_kernel_caches_to_the_next_machine(
        carry: ModuleType, tmp_path: Path) -> None:
    """run.sh's steps 7 and 4d, each run alone with the real `crossbench engines kernel-cache`
    and a stand-in nvidia-smi: an H100 that ran an SGLang round packs its kernel caches and
    returns the parts, `carry.py keep --kernels` keeps them, and on the next machine (an
    H200, compute capability 9.0 too) the carried parts are joined and unpacked beside its
    own entries before the round; a machine of compute capability 8.0 refuses the pack and
    starts cold, its caches untouched."""
    import os
    import subprocess
    import sys

    from standins.sglang import write_launcher

    root = Path(__file__).resolve().parents[1]
    script = root / "benchmarks" / "study" / "carry.py"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python3").symlink_to(sys.executable)
    prefix = tmp_path / "engines" / "sglang-0.5.17-py3.12"
    (prefix / "bin").mkdir(parents=True)
    write_launcher(prefix / "bin" / "python", "--standin-step-ms", "0")

    def machine(name: str, gpu: str) -> dict[str, str]:
        smi = tmp_path / name / "bin" / "nvidia-smi"
        smi.parent.mkdir(parents=True)
        smi.write_text(f'#!/bin/sh\necho "{gpu}"\n')
        smi.chmod(0o755)
        log = tmp_path / name / "log"
        log.mkdir()
        return {"PATH": f"{smi.parent}:{bin_}:{os.environ['PATH']}", "LOG": str(log),
                "HOME": str(tmp_path / name / "home"), "PYTHONPATH": str(root),
                "OUT": str(tmp_path / name / "out"), "ROUND": "ngram2", "PART": "3",
                "need_vllm": "0", "need_sglang": "1", "sprefix": f"{prefix}/"}

    head = 'say() { echo "$*"; }\ncb() { python3 -m crossbench "$@"; }\n'
    # the H100: the round has ended; its caches hold one JIT module and one Triton kernel
    a = machine("h100", "NVIDIA H100 80GB HBM3, 9.0")
    home = Path(a["HOME"])
    (home / ".cache" / "tvm-ffi" / "sgl_kernel_jit_x").mkdir(parents=True)
    (home / ".cache" / "tvm-ffi" / "sgl_kernel_jit_x" / "x.so").write_bytes(_noise(3000))
    (home / ".triton" / "cache" / "c0ffee").mkdir(parents=True)
    (home / ".triton" / "cache" / "c0ffee" / "k.cubin").write_bytes(_noise(2000))
    Path(a["OUT"]).mkdir()
    (tmp_path / "cross-logs").mkdir()  # what logs.tgz packs ($LOG on the device)
    Path(a["LOG"], "matrix-roundngram2-part3.exit").write_text("matrix_exit=0\n")
    step7 = (_pack_block(tmp_path / "cc-out", tmp_path / "kc-out")
             + _run_sh_block(r'^if \[ -f "\$LOG/matrix-round\$RKEY\.exit" \]; then\n.*?^fi\n'))
    step7 = step7.replace("benchmarks/study/carry.py", str(script)).replace(
        "tar -C /tmp", f"tar -C {tmp_path}")
    res = subprocess.run(["bash", "-c", head + step7], capture_output=True, text=True,
                         env=a, timeout=120)
    size = (tmp_path / "kc-out" / "sglang-kernels.tgz").stat().st_size
    assert res.stdout.splitlines() == [f"kernel cache: sglang-kernels.tgz: {size} bytes; "
                                       "sglang-kernels.tgz.p0of1 returned; every part "
                                       "returned"], res.stdout + res.stderr
    assert sorted(p.name for p in Path(a["OUT"]).iterdir()) == ["logs.tgz",
                                                                "sglang-kernels.tgz.p0of1"]
    assert "compile cache" not in res.stdout  # an SGLang-only round packs no vLLM cache
    made = Path(a["LOG"], "kernel-cache.txt").read_text()
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0): tvm_ffi 1 entries, triton 1 " \
        "entries" in made
    # here: the part kept in the folder of its build and architecture
    repo = tmp_path / "repo"
    kept = carry.keep(Path(a["OUT"]), repo / ".carry" / "sglang-kernels", kernels=True)
    assert len(kept) == 1 and kept[0].parent.name.endswith("-sm90")
    assert kept[0].parent.name.startswith("0.5.17-")

    step4d = (_run_sh_block(r"^carried_parts\(\) \{.*?^\}\n")
              + _run_sh_block(r"^unpack_carried\(\) \{.*?^\}\n")
              + _run_sh_block(r'^if \[ "\$need_sglang" = 1 \]; then\n  carried_parts .*?^fi\n'))
    step4d = step4d.replace("benchmarks/study/carry.py", str(script))

    def next_machine(name: str, gpu: str) -> tuple[dict[str, str], list[str]]:
        env = machine(name, gpu)
        own = Path(env["HOME"]) / ".triton" / "cache" / "beef00"
        own.mkdir(parents=True)
        (own / "k.cubin").write_bytes(b"its own")
        kc_in = tmp_path / name / "kc-in"
        done = subprocess.run(["bash", "-c", head + step4d.replace("/tmp/kc-in", str(kc_in))],
                              cwd=repo, capture_output=True, text=True, env=env, timeout=120)
        return env, done.stdout.splitlines()

    b, said = next_machine("h200", "NVIDIA H200, 9.0")
    assert said[0] == f"kept {kept[0].name} ({kept[0].stat().st_size} bytes)"
    assert said[1].startswith("kernel cache sglang-kernels.tgz unpacked: ")
    assert said[1].endswith("(sm90): 2 entries added (tvm_ffi 1, triton 1), 0 already there")
    there = Path(b["HOME"])
    for rel in (".cache/tvm-ffi/sgl_kernel_jit_x/x.so", ".triton/cache/c0ffee/k.cubin"):
        assert (there / rel).read_bytes() == (home / rel).read_bytes()
    assert (there / ".triton" / "cache" / "beef00" / "k.cubin").read_bytes() == b"its own"
    c, said = next_machine("a100", "NVIDIA A100-SXM4-80GB, 8.0")
    assert said[1].startswith("kernel cache sglang-kernels.tgz NOT unpacked: crossbench: "
                              "error: kernel-cache: ")
    assert "compute_cap differs" in said[1]
    assert sorted(p.name for p in (Path(c["HOME"]) / ".triton" / "cache").iterdir()) == \
        ["beef00"] and not (Path(c["HOME"]) / ".cache").exists()
    assert (tmp_path / "a100" / "kc-in" / "sglang-kernels.tgz.unpacked").is_file()


def _lean_repo(tmp_path: Path) -> tuple[Path, Any]:
    """A git repository of 3 MB of examples and 1000 bytes of code, committed, and a git
    runner for it (``check``: whether a failure raises)."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], capture_output=True, text=True,
                              check=check)

    git("init", "-q")
    _sized(repo / "examples" / "r1" / "a.zip", 3_000_000)
    _sized(repo / "examples" / "r1" / "report.md", 500)
    _sized(repo / "crossbench" / "code.py", 1_000)
    git("add", "-A")
    git("commit", "-q", "-m", "x")
    return repo, git


def test_lean_leaves_the_examples_behind_and_takes_them_along_again(
        carry: ModuleType, tmp_path: Path) -> None:
    """`carry.py lean on` makes examples/ a nested git repository and takes its files out of
    the outer index (they stay on disk), so the tree a device call copies loses the examples'
    bytes (the device counts what the index tracks: on 2026-12-07 a nested repository still in
    the index was refused); a pre-commit hook refuses commits meanwhile, which would delete the
    examples. `lean off` restores the index, removes the nested .git and the hook, and commits
    go through again. `on` is refused while examples/ has uncommitted changes (git would not
    see new files there) and where examples/.git is a repository crossbench did not make."""
    import os
    import subprocess

    repo, git = _lean_repo(tmp_path)
    examples = ["examples/r1/a.zip", "examples/r1/report.md"]
    whole = carry.tree_bytes(repo)
    assert whole == 3_001_500 and carry.tree_bytes(repo, "examples") == 3_000_500
    _sized(repo / "examples" / "r2" / "b.zip", 10)  # a landed round not yet committed
    with pytest.raises(ValueError, match="uncommitted changes .*commit them first"):
        carry.lean(repo, True)
    assert not (repo / "examples" / ".git").exists()  # refused before anything was done
    (repo / "examples" / "r2" / "b.zip").unlink()
    (repo / "examples" / "r2").rmdir()
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.unlink(missing_ok=True)  # git init may have put samples there, not this one

    assert carry.lean(repo, True) == (
        "examples/ stays behind device calls (tree now 1000 bytes): its files are out of the "
        "index until `lean off`; a pre-commit hook refuses commits meanwhile")
    assert carry.is_lean(repo) and carry.tree_bytes(repo) == 1_000
    assert carry.tree_bytes(repo, "examples") == 0  # untracked nested repository: nothing
    assert git("ls-files", "examples").stdout == ""
    assert [(repo / n).stat().st_size for n in examples] == [3_000_000, 500]  # on disk
    assert git("ls-files", "-z", "--others", "--exclude-standard").stdout == "examples/\0"
    assert sorted(git("status", "--porcelain").stdout.splitlines()) == \
        ["?? examples/"] + [f"D  {n}" for n in examples]
    assert hook.is_file() and os.access(hook, os.X_OK) and \
        hook.read_text().startswith("#!/bin/sh\n" + carry.LEAN_HOOK + "\n")
    (repo / "crossbench" / "code.py").write_text("changed")
    git("add", "crossbench/code.py")
    refused = git("commit", "-m", "x", check=False)
    assert refused.returncode != 0
    assert "examples/ is lean (benchmarks/study/carry.py lean on)" in refused.stderr
    assert "`python3 benchmarks/study/carry.py lean off` before committing" in refused.stderr
    assert git("rev-list", "--count", "HEAD").stdout.strip() == "1"  # nothing committed
    assert git("ls-tree", "-r", "--name-only", "HEAD", "examples").stdout.split() == examples
    assert carry.lean(repo, True).endswith(
        "(tree now 7 bytes; lean was on already): its files are out of the index until "
        "`lean off`; a pre-commit hook refuses commits meanwhile")
    assert git("ls-files", "examples").stdout == ""

    assert carry.lean(repo, False) == \
        "examples/ travels with the tree again (index restored; pre-commit hook removed)"
    assert not carry.is_lean(repo) and not (repo / "examples" / ".git").exists()
    assert not hook.exists()
    assert git("ls-files", "examples").stdout.split() == examples
    assert git("status", "--porcelain").stdout == "M  crossbench/code.py\n"
    assert carry.tree_bytes(repo) == whole - 1_000 + len("changed")
    git("commit", "-q", "-m", "code only")  # goes through, and leaves the examples alone
    assert git("status", "--porcelain").stdout == ""
    assert git("ls-tree", "-r", "--name-only", "HEAD", "examples").stdout.split() == examples
    assert carry.lean(repo, False) == "examples/ travels with the tree (lean is off)"

    subprocess.run(["git", "init", "-q", str(repo / "examples")], check=True)  # not ours
    with pytest.raises(ValueError, match="a repository crossbench did not make"):
        carry.lean(repo, True)
    assert carry.lean(repo, False) == "examples/ travels with the tree (lean is off)"
    assert (repo / "examples" / ".git").is_dir()  # left as found
    assert git("ls-files", "examples").stdout.split() == examples and not hook.exists()


def test_lean_completes_a_half_done_state(carry: ModuleType, tmp_path: Path) -> None:
    """The marker there but the index restored by hand (`git reset -- examples`, or a `lean
    on` of before 2026-12-07, which left the index alone): `lean on` again takes the files out
    of the index, refusing while they have changes; `lean off` of a state whose index was
    restored already, or never emptied, restores nothing wrongly and removes the rest."""
    repo, git = _lean_repo(tmp_path)
    hook = repo / ".git" / "hooks" / "pre-commit"
    carry.lean(repo, True)
    git("reset", "-q", "--", "examples")
    assert carry.is_lean(repo) and git("status", "--porcelain").stdout == ""
    assert carry.tree_bytes(repo) == 3_001_500  # what the device refused on 2026-12-07
    (repo / "examples" / "r1" / "report.md").write_text("edited")
    with pytest.raises(ValueError, match=r"uncommitted changes \(M examples/r1/report\.md, "
                                         r"\.\.\.\): `lean off`, commit them, then `lean on`"):
        carry.lean(repo, True)
    git("checkout", "-q", "--", "examples")
    assert carry.lean(repo, True).startswith(
        "examples/ stays behind device calls (tree now 1000 bytes; lean was on already)")
    assert git("ls-files", "examples").stdout == "" and hook.is_file()

    git("reset", "-q", "--", "examples")  # restored by hand, then off
    assert carry.lean(repo, False).startswith("examples/ travels with the tree again")
    assert git("status", "--porcelain").stdout == "" and not hook.exists()
    assert not (repo / "examples" / ".git").exists()

    carry.lean(repo, True)
    hook.unlink()  # a hook lost; off restores all the same
    assert carry.lean(repo, False) == \
        "examples/ travels with the tree again (index restored; no pre-commit hook was there)"
    assert git("status", "--porcelain").stdout == "" and carry.tree_bytes(repo) == 3_001_500


def test_lean_leaves_a_foreign_pre_commit_hook_in_place(
        carry: ModuleType, tmp_path: Path) -> None:
    """A pre-commit hook crossbench did not write stays as it is through `lean on` and `lean
    off`; `on` still leaves the examples behind, and its line says no hook guards the
    commits."""
    import os

    repo, git = _lean_repo(tmp_path)
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    foreign = "#!/bin/sh\n# someone's own checks\nexit 0\n"
    hook.write_text(foreign)
    hook.chmod(0o700)
    said = carry.lean(repo, True)
    assert said == (
        "examples/ stays behind device calls (tree now 1000 bytes): its files are out of the "
        f"index until `lean off`; NO pre-commit hook installed ({hook} is not crossbench's): "
        "commit nothing before `lean off`")
    assert carry.is_lean(repo) and git("ls-files", "examples").stdout == ""
    assert hook.read_text() == foreign and os.stat(hook).st_mode & 0o777 == 0o700
    assert carry.lean(repo, True).endswith("commit nothing before `lean off`")
    assert hook.read_text() == foreign
    assert carry.lean(repo, False) == ("examples/ travels with the tree again (index restored; "
                                       f"{hook} is not crossbench's: left in place)")
    assert hook.read_text() == foreign and os.stat(hook).st_mode & 0o777 == 0o700
    assert git("status", "--porcelain").stdout == "" and not carry.is_lean(repo)


def test_lean_hook_goes_where_core_hooks_path_says(carry: ModuleType, tmp_path: Path) -> None:
    """With core.hooksPath set (relative to the working tree) the hook goes there, where git
    runs it, and `lean off` removes it from there."""
    repo, git = _lean_repo(tmp_path)
    git("config", "core.hooksPath", ".githooks")
    carry.lean(repo, True)
    assert (repo / ".githooks" / "pre-commit").is_file()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    refused = git("commit", "--allow-empty", "-m", "x", check=False)
    assert refused.returncode != 0 and "lean off" in refused.stderr
    carry.lean(repo, False)
    assert not (repo / ".githooks" / "pre-commit").exists()
    assert git("commit", "-q", "--allow-empty", "-m", "x", check=False).returncode == 0
