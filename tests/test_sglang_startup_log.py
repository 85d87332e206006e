"""SGLang's start-up facts (``crossbench/engines/sglang/startup_log.py``): parsed from the real
server logs the H100 archives of 2026-12-06 hold (SGLang 0.5.17's own lines), and recorded for
each start by the adapter (against the stand-in, which prints those lines in SGLang's format
with placeholder figures: not SGLang)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from standins.sglang import write_launcher

from crossbench.engines import registry
from crossbench.engines.sglang import startup_log

ROOT = Path(__file__).resolve().parents[1]
ARCHIVES = [ROOT / "examples/h100-methods/sglang-methods-part1/"
                   "h100-sglang-methods-part1-sglang-methods.zip",
            ROOT / "examples/h100-methods/sglang-methods-part2/"
                   "h100-sglang-methods-part2-sglang-methods-b.zip"]


def _starts() -> dict[tuple[int, str], str]:
    """Each start's server log in the archives, by (part, cell folder); the logs of trials
    on a shared start only name the cell whose log holds the start."""
    out = {}
    for part, archive in enumerate(ARCHIVES, 1):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith("/server.log"):
                    text = z.read(name).decode()
                    if "server_args=ServerArgs" in text:
                        out[(part, name.split("/")[-2])] = text
    return out


def test_the_archived_starts_split_as_the_docs_say() -> None:
    """Nine starts: the machine's first (part 1's baseline) captured the target's prefill
    graph in 61.38 s, every later one in 8.51-9.12 s; weights 1.8-2.0 s (target and
    drafter); the KV pool as the server info gave it (the drafter's memory shrinks it)."""
    starts = _starts()
    assert len(starts) == 9
    first = startup_log.parse(starts[(1, "sglang__t8b-hf__none__builtin-mixed__c16")])
    assert first.graphs_s == {"target prefill": 61.38, "target decode": 2.67}
    assert (first.load_weight_s, first.kv_cache_tokens) == (1.86, 362905)
    assert first.marks_s == {"weights": 21.0, "kv_cache": 24.0, "graphs": 88.0, "ready": 96.0}
    later = {k: startup_log.parse(v) for k, v in starts.items()
             if k != (1, "sglang__t8b-hf__none__builtin-mixed__c16")}
    prefill = sorted(f.graphs_s["target prefill"] for f in later.values())
    assert (prefill[0], prefill[-1]) == (8.51, 9.12)
    assert all(1.7 < (f.load_weight_s or 0) < 2.0 for f in later.values())
    eagle = later[(1, "sglang__t8b-hf__eagle3-a0.9__n4__builtin-mixed__c1")]
    assert set(eagle.graphs_s) == {"target prefill", "target verify", "draft prefill",
                                   "draft decode", "draft extend"}
    assert eagle.kv_cache_tokens == 337280
    assert eagle.graph_capture_s == pytest.approx(sum(eagle.graphs_s.values()))
    assert all(f.marks_s["ready"] >= f.marks_s["graphs"] >= f.marks_s["weights"]
               for f in later.values())


def test_a_log_without_sglangs_lines_gives_nothing() -> None:
    facts = startup_log.parse("crossbench stand-in\nsome other line\n")
    assert facts.to_dict() == {"load_weight_s": None, "kv_cache_tokens": None,
                               "graph_capture_s": None, "graphs_s": {}, "marks_s": {}}


def test_each_start_records_its_phases(tmp_path: Path) -> None:
    """The adapter reads this start's lines only (the log is appended to across starts) and
    records them with the seconds from spawn to ready as the manifest's ``startup_cut``."""
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B"},
                          tmp_path / "server.log")
    for _ in range(2):
        with srv:
            cut = srv.props()["startup_cut"]
    assert cut["ready_s"] > 0
    # 0.01 s, not 0.02: the second start's record reads its own lines, not the first's too
    assert (cut["load_weight_s"], cut["kv_cache_tokens"], cut["graph_capture_s"]) == \
        (0.01, 4096, 0.0)
    assert cut["graphs_s"] == {"target decode": 0.0} and "ready" in cut["marks_s"]
    assert (tmp_path / "server.log").read_text().count("fired up") == 2


def test_each_start_says_whether_it_compiled_kernels(tmp_path: Path) -> None:
    """The kernel caches' entries before and after each start, and its kind: the first start
    of a configuration fills an empty SGLang JIT cache (cold: the stand-in makes a module
    folder there, as SGLang's nvcc-built kernels do), the same configuration again finds it
    (warm), another algorithm builds its own beside it (partial). ``trial_start`` reads the
    kind, so ``crossbench plan`` prices cold and warm SGLang starts apart."""
    from crossbench.store.rundir import trial_start

    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    jit, triton = tmp_path / "tvm-ffi", tmp_path / "triton"
    env = {"TVM_FFI_CACHE_DIR": str(jit), "TRITON_CACHE_DIR": str(triton)}

    def start(**spec: object) -> dict[str, object]:
        srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                         "env": env, **spec}, tmp_path / "server.log")
        with srv:
            cut: dict[str, object] = srv.props()["startup_cut"]
        return cut

    first, again = start(), start()
    assert first["start"] == "cold" and again["start"] == "warm"
    assert first["kernel_caches"] == {
        "tvm_ffi": {"root": str(jit), "before": 0, "after": 1},
        "triton": {"root": str(triton), "before": 0, "after": 0}}
    other = start(spec={"type": "NGRAM", "n": 4})
    assert other["start"] == "partial"
    assert other["kernel_caches"]["tvm_ffi"] == {"root": str(jit), "before": 1, "after": 2}
    entry = {"phase_s": {"startup": 1.0}, "server_props": {"startup_cut": first}}
    made = trial_start(entry)
    assert made is not None and made.cache == "cold"


def test_start_kind_reads_growth_not_presence() -> None:
    assert startup_log.start_kind({"a": 0, "b": 0}, {"a": 0, "b": 0}) == "warm"
    assert startup_log.start_kind({"a": 0, "b": 0}, {"a": 3, "b": 0}) == "cold"
    assert startup_log.start_kind({"a": 2, "b": 0}, {"a": 2, "b": 5}) == "partial"
    assert startup_log.start_kind({"a": 2, "b": 1}, {"a": 2, "b": 1}) == "warm"
    roots = startup_log.kernel_cache_roots({"HOME": "/h"})
    assert roots == {"tvm_ffi": Path("/h/.cache/tvm-ffi"), "triton": Path("/h/.triton/cache")}
