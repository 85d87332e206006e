"""``crossbench matrix --executor ray`` on a real local Ray cluster of logical GPUs.

Ray runs here on CPU with 4 logical GPUs (``num_gpus=4``: Ray hands them out and sets
``CUDA_VISIBLE_DEVICES`` as it does for real cards); the engine is crossbench's stand-in for
``vllm serve`` (CPU processes, not vLLM). Checked: a matrix spread over 4 lanes gives the same
records and journal as the sequential runner, with each trial's card and node in its journal
line and its provenance; a worker killed in the middle of a trial (one of its two records
written) is journaled as failed, its trial runs again on a new worker given another GPU,
after the round's finished partner runs again there, its servers do not survive and its
partial record is dropped; a driver killed with ``kill -9`` takes its local Ray cluster and
servers with it and is resumed to completion. Timings are printed (``pytest -s``); the file
takes 2 to 3 minutes on 2 cores (the sequential reference runs beside the other tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from standins.vllm import write_launcher

from crossbench.analysis.confounding import occasions, split_occasions
from crossbench.cli.main import cli
from crossbench.runner.matrix import expand, load_matrix, schedule
from crossbench.runner.matrix_run import LOST_RETRIES, read_journal, run_matrix
from crossbench.store.atomic import read_jsonl

pytestmark = pytest.mark.skipif(
    find_spec("ray") is None,
    reason="Ray is not installed: pip install 'crossbench[ray]' (the dev extra includes it)")

GPUS = 4
RAY_RESOURCES = {"CPU": 2, "GPU": GPUS, "object_store_memory": 100 * 1024 * 1024}
"""The test cluster: 2 CPUs, 4 logical GPUs, a 100 MiB object store."""


def _say(what: str, t0: float) -> None:
    print(f"[ray-executor] {what}: {time.monotonic() - t0:.1f} s", file=sys.stderr)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One local Ray cluster for the in-process tests (the executor uses it as it is)."""
    import ray

    t0 = time.monotonic()
    ray.init(num_cpus=RAY_RESOURCES["CPU"], num_gpus=GPUS, include_dashboard=False,
             object_store_memory=RAY_RESOURCES["object_store_memory"], log_to_driver=False)
    _say("ray.init", t0)
    yield
    ray.shutdown()


def write_matrix(tmp: Path, targets: int, concurrency: str, step_ms: int,
                 requests: int = 2, max_tokens: int = 16) -> Path:
    """A stand-in matrix: ``targets`` x concurrency x {none, ngram n=2 synthetic}, 2 trials.
    A lane per (target, concurrency): its baseline and its speculative cell."""
    binary = write_launcher(tmp / "vllm", "--standin-step-ms", str(step_ms),
                            "--standin-prefill-ms", "0")
    repos = ["Qwen/Qwen3-8B", "Qwen/Qwen3-4B"][:targets]
    matrix = {
        "schema_version": 1,
        "study": {"name": "ray-standin", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2}}},
        "models": {f"t{i}": {"hf": {"repo": repo, "revision": "b" * 40}, "quant": "BF16",
                             "role": "target"} for i, repo in enumerate(repos)},
        "load": {"requests": requests, "warmup": 0, "max_tokens": max_tokens},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "ngram", "n": 2, "synth_rates": [0.8, 0.5]}],
        "axes": {"engine": ["v"], "target": [f"t{i}" for i in range(targets)],
                 "workload": ["builtin:code"], "concurrency": concurrency},
        "trials": 2,
    }
    path = tmp / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


def records(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Per cell folder: (trial, request_index, prompt_id, status, completion tokens), sorted."""
    got = {}
    for f in sorted((out / "cells").glob("*/requests.jsonl")):
        got[f.parent.name] = sorted(
            (r["trial"], r["request_index"], r["prompt_id"], r["status"],
             (r.get("usage") or {}).get("completion_tokens")) for r in read_jsonl(f))
    return got


def journal_set(out: Path) -> set[tuple[str, int, str]]:
    """(cell, trial, status) of every trial, as the journal's last line on it says."""
    return {(c, t, r["status"]) for (c, t), r in read_journal(out).items()}


def manifests(out: Path) -> dict[str, dict[str, Any]]:
    """Each cell's manifest by cell id."""
    state = json.loads((out / "state.json").read_text())
    return {c["id"]: json.loads((out / c["dir"] / "manifest.json").read_text())
            for c in state["cells"] if (out / c["dir"] / "manifest.json").exists()}


def provenance(manifest: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each trial's provenance record by trial number."""
    return {e["trial"]: e["provenance"] for e in manifest["trials"]}


def assert_no_duplicates(out: Path, requests: int) -> None:
    """Every cell holds each (trial, request) exactly once, for both trials."""
    for name, recs in records(out).items():
        keys = [(r[0], r[1]) for r in recs]
        assert sorted(keys) == [(t, i) for t in range(2) for i in range(requests)], name


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """``pids`` still alive after waiting up to ``timeout_s`` for them to end."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def cmdline(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def parent(pid: int | str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is among the parents of ``pid``."""
    while pid > 1:
        pid = parent(pid)
        if pid == ancestor:
            return True
    return False


def standin_servers() -> dict[int, int]:
    """Stand-in vLLM servers running under a Ray lane worker of this process's cluster (not
    another test run's): server pid -> worker pid."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        cmd = cmdline(entry.name)
        if "standins.vllm" in cmd and " serve " in cmd:
            worker = parent(entry.name)
            if cmdline(worker).startswith("ray::LaneWorker") and \
                    descends_from(worker, os.getpid()):
                found[int(entry.name)] = worker
    return found


def tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (a driver and all it started)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if tag.encode() in (entry / "environ").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_lanes_keep_pairs_together_and_the_schedule_order(tmp_path: Path) -> None:
    from crossbench.runner.ray_exec import plan_lanes

    path = write_matrix(tmp_path, targets=2, concurrency="1,2", step_ms=0)
    m = load_matrix(path)
    cells = expand(m, path)
    order = schedule(cells, m.trials, "interleaved", 0)
    lanes = plan_lanes(cells, order[3:])  # a resumed run: the first three trials done
    assert len(lanes) == 4
    by_cell = {cid: lane for lane in lanes for cid in lane.cells}
    for c in cells:  # a speculative cell runs in its baseline's lane
        assert by_cell[c.id].name == (c.baseline or c.id)
    assert sorted(t for lane in lanes for t in lane.todo) == sorted(order[3:])
    for lane in lanes:  # each lane keeps the schedule's interleaved order
        assert lane.todo == [x for x in order[3:] if x[0] in lane.cells]
    firsts = [order[3:].index(lane.todo[0]) for lane in lanes]
    assert firsts == sorted(firsts)


def occasion_manifest(*trials: tuple[int, str | None], node: str | None = None,
                      boot: str = "b") -> dict[str, Any]:
    """A manifest whose trials (number, CUDA_VISIBLE_DEVICES) saw no GPU through NVML."""
    return {"trials": [{"trial": t, "provenance": {
        "host": {"boot_id": boot}, "gpu": {"available": False, "gpus": []},
        "env": {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd},
        **({"placement": {"node_id": node}} if node else {})}} for t, cvd in trials]}


def test_split_occasions_read_cuda_visible_devices_without_gpu_uuids() -> None:
    man = occasion_manifest
    assert occasions(man((0, "1"))) == {0: ("b", ("CUDA_VISIBLE_DEVICES=1",))}
    assert occasions(man((0, None))) == {0: ("b", ())}
    assert split_occasions(man((0, "1"), (1, "2")), man((0, "1"), (1, "3"))) == [1]
    assert split_occasions(man((0, None)), man((0, None))) == []
    assert split_occasions(man((0, None)), man((0, "0"))) == [0]
    assert split_occasions(man((0, "0")), man((0, "0"), boot="c")) == [0]
    # Ray's node id is recorded, not compared: a cluster started again on the same machine
    # gives the same card a new node id
    assert split_occasions(man((0, "0"), node="n1"), man((0, "0"), node="n2")) == []
    # real GPUs: their UUIDs decide, as before
    real = {"trials": [{"trial": 0, "provenance": {"host": {"boot_id": "b"},
                                                   "gpu": {"gpus": [{"uuid": "GPU-1"}]},
                                                   "env": {"CUDA_VISIBLE_DEVICES": "0"}}}]}
    assert occasions(real) == {0: ("b", ("GPU-1",))}


def test_a_lane_on_other_gpus_runs_the_partners_of_its_trials_again(tmp_path: Path) -> None:
    from crossbench.runner.ray_exec import partners_elsewhere, plan_lanes

    path = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=0)
    m = load_matrix(path)
    cells = expand(m, path)
    order = schedule(cells, 3, "interleaved", 0)
    (lane,) = plan_lanes(cells, order)
    base = lane.name
    (spec,) = [c for c in lane.cells if c != base]
    gpu0, gpu1 = ("b", ("CUDA_VISIBLE_DEVICES=0",)), ("b", ("CUDA_VISIBLE_DEVICES=1",))
    # round 0 whole and the baseline of round 1 ran on GPU 0; the rest is to run
    ran = {base: {0: gpu0, 1: gpu0}, spec: {0: gpu0}}
    pending = [(spec, 1), (base, 2), (spec, 2)]
    assert partners_elsewhere(lane, pending, ran, gpu0, order) == []
    assert partners_elsewhere(lane, pending, ran, gpu1, order) == [(base, 1)]
    # the speculative cell went first: its trial runs again for the baseline's
    ran = {base: {0: gpu0}, spec: {0: gpu0, 1: gpu0}}
    pending = [(base, 1), (base, 2), (spec, 2)]
    assert partners_elsewhere(lane, pending, ran, gpu1, order) == [(spec, 1)]
    # another machine with the same card number is another occasion too
    assert partners_elsewhere(lane, pending, ran, ("c", gpu0[1]), order) == [(spec, 1)]
    assert partners_elsewhere(lane, [], ran, gpu1, order) == []


def test_executor_options_without_ray_or_out_of_place(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=0)
    runner = CliRunner()
    for extra in (["--lane-gpus", "2"], ["--address", "head:6379"]):
        res = runner.invoke(cli, ["matrix", str(path), "--out", str(tmp_path / "o"), *extra])
        assert res.exit_code == 2
        assert res.output == ("crossbench: error: --address and --lane-gpus go with --executor "
                              "ray (fix: add --executor ray, or drop them)\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    res = runner.invoke(cli, ["matrix", str(path), "--out", str(tmp_path / "o"),
                              "--executor", "ray"])
    assert res.exit_code == 2
    assert res.output == ("crossbench: error: --executor ray needs Ray, which is not "
                          "installed (fix: pip install 'crossbench[ray]', or run with "
                          "--executor local)\n")
    assert not (tmp_path / "o").exists()


def test_the_default_install_never_imports_ray() -> None:
    """The CLI and the runner (the Ray executor's module included) load without Ray: it is
    imported only when ``--executor ray`` runs."""
    code = ("import sys; import crossbench.cli.main, crossbench.runner.matrix_run, "
            "crossbench.runner.ray_exec; print(sorted(m for m in sys.modules "
            "if m == 'ray' or m.startswith('ray.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=cli_env(), timeout=120, check=False)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr[-2000:]


def test_a_worker_that_cannot_start_stops_the_run() -> None:
    """An actor whose __init__ failed is not a lost worker: retrying it would fail alike."""
    from ray.exceptions import RayActorError

    from crossbench.errors import RunError
    from crossbench.runner.ray_exec import RayExecutor

    RayExecutor._check_started(RayActorError("a1", "died: node gone"), "lane-x")  # retried
    with pytest.raises(RunError) as err:
        RayExecutor._check_started(
            RayActorError("a1", "ModuleNotFoundError: No module named 'crossbench'\nmore",
                          actor_init_failed=True), "lane-x")
    assert err.value.one_line() == (
        "the Ray worker of lane lane-x could not start (RayActorError: ModuleNotFoundError: "
        "No module named 'crossbench') (fix: install this crossbench version (and the "
        "engines) on every node of the cluster; Ray's worker logs hold the traceback)")


def test_resume_runs_a_lost_trial_again_while_it_has_attempts(tmp_path: Path) -> None:
    """A driver killed right after journaling a lost worker: --resume (either executor) runs
    that trial again, once, and the journal's last word on it is the re-run."""
    from crossbench.runner.matrix_run import retry_attempts

    lost = {"status": "failed", "error": "worker lost: x", "worker_lost": True}
    assert retry_attempts({("a", 0): {**lost, "attempt": 1},
                           ("a", 1): {**lost, "attempt": LOST_RETRIES + 1},
                           ("b", 0): {"status": "failed", "error": "500 errors"},
                           ("b", 1): {"status": "ok", "attempt": 1}}) == {("a", 0): 1}
    path = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=0)
    out, only = tmp_path / "run", ("method=none",)  # one cell, two trials
    t0 = time.monotonic()
    run_matrix(path, out, only=only)
    cid = read_jsonl(out / "journal.jsonl")[0]["cell"]  # its worker "died" after the manifest
    with (out / "journal.jsonl").open("a") as f:
        f.write(json.dumps({"cell": cid, "trial": 0, **lost, "attempt": 1}) + "\n")
    assert read_journal(out)[(cid, 0)]["status"] == "failed"
    ticks: list[Any] = []
    s = run_matrix(path, out, resume=True, only=only, on_tick=ticks.append)
    _say("local run and a resume of one lost trial", t0)
    assert s["totals"] == {"done": 2, "failed": 0, "missing": 0}
    assert [(k.trial, k.failures, k.ended) for k in ticks] == [(0, 0, False), (0, 0, True)]
    lines = read_jsonl(out / "journal.jsonl")
    assert len(lines) == 4 and (lines[-1]["cell"], lines[-1]["trial"]) == (cid, 0)
    assert lines[-1]["status"] == "ok"
    assert_no_duplicates(out, requests=2)
    assert run_matrix(path, out, resume=True, only=only)["totals"]["done"] == 2  # nothing left
    assert len(read_jsonl(out / "journal.jsonl")) == 4


RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
"""Ray's per-node agents: after a ``kill -9`` of the driver they outlive its cluster for a
minute or two (then exit on their own)."""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m crossbench`` child: this checkout's crossbench first,
    no RAY_ADDRESS (a child starts its own cluster)."""
    root = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return {**env, **extra}


def matrix_cli(args: list[str], cwd: Path, env: dict[str, str], log: str
               ) -> subprocess.Popen[bytes]:
    """``crossbench matrix m.yaml ARGS`` in ``cwd``, in a session of its own; its output in
    ``LOG.out`` and ``LOG.err``."""
    with (cwd / f"{log}.out").open("wb") as o, (cwd / f"{log}.err").open("wb") as e:
        return subprocess.Popen([sys.executable, "-m", "crossbench", "matrix", "m.yaml",
                                 "--progress", "plain", *args], cwd=cwd, env=env, stdout=o,
                                stderr=e, start_new_session=True)


def _driver(args: list[str], cwd: Path, env: dict[str, str], log: str
            ) -> subprocess.Popen[bytes]:
    return matrix_cli(["--out", "run", "--executor", "ray", "--only", "method=none", *args],
                      cwd, env, log)


@dataclass
class Sequential:
    """The 4-lane matrix, run by the sequential runner in a process of its own."""

    matrix: Path
    proc: subprocess.Popen[bytes]
    started: float

    def wait(self) -> Path:
        """Wait for the run to end (it must succeed); its run directory."""
        err = self.matrix.parent / "local.err"
        assert self.proc.wait(300) == 0, err.read_text()[-2000:]
        _say("the sequential runner, 8 cells x 2 trials (beside other tests)", self.started)
        return self.matrix.parent / "local"


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sequential]:
    """``crossbench matrix --executor local`` of a matrix of 4 lanes (2 targets x
    concurrency 1, 2; a baseline and a speculative cell each), started on first use so that
    it runs beside the tests that follow (most of a stand-in trial is waiting)."""
    tmp = tmp_path_factory.mktemp("sequential")
    path = write_matrix(tmp, targets=2, concurrency="1,2", step_ms=0)
    run = Sequential(path, matrix_cli(["--out", "local"], tmp, cli_env(), "local"),
                     time.monotonic())
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait(10)


def test_a_killed_driver_is_resumed_to_completion(tmp_path: Path) -> None:
    """``kill -9`` of the driver alone (the ``crossbench matrix`` process, which started a
    local Ray cluster), two lanes of one baseline cell each: Ray's processes and the stand-in
    servers go with it, and --resume completes the run. Runs before the in-process cluster
    exists (file order), so that two clusters never share the 2 cores."""
    path = write_matrix(tmp_path, targets=1, concurrency="1,2", step_ms=10, max_tokens=32)
    tag = f"crossbench-test-{uuid.uuid4().hex}"
    env = cli_env(RAY_OVERRIDE_RESOURCES=json.dumps({"CPU": 2, "GPU": 2}),
                  CROSSBENCH_TEST_TAG=tag)
    out = path.parent / "run"
    t0 = time.monotonic()
    proc = _driver([], path.parent, env, "first")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            journal = out / "journal.jsonl"
            if journal.exists() and journal.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, (path.parent / "first.err").read_text()[-2000:]
        assert len(tagged(tag)) > 3, "the driver, Ray's processes and workers carry the tag"
        os.kill(proc.pid, signal.SIGKILL)  # the driver alone
        proc.wait(10)
        _say("driver killed after 1 of 4 trials", t0)
        # workers, servers, raylet and GCS go at once (Ray's reaper); Ray's two agents of
        # the node exit on their own a minute or two later (they try to reach the GCS first)
        left = wait_gone([p for p in tagged(tag) if not cmdline(p).startswith(RAY_AGENTS)])
        assert left == [], [cmdline(p) for p in left]
    finally:
        for pid in tagged(tag):  # never leave a cluster behind, even when the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    done = len(read_journal(out))
    assert 1 <= done < 4
    t0 = time.monotonic()
    again = _driver(["--resume"], path.parent, env, "resume")
    try:
        assert again.wait(300) == 0, (path.parent / "resume.err").read_text()[-2000:]
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
    _say("resumed to completion", t0)
    assert wait_gone(tagged(tag)) == []
    assert "trials: 4 done, 0 failed, 0 missing" in (path.parent / "resume.out").read_text()
    journal = read_journal(out)
    assert len(journal) == 4 and all(r["status"] == "ok" for r in journal.values())
    assert len(read_jsonl(out / "journal.jsonl")) == 4  # a killed trial left no line
    assert_no_duplicates(out, requests=2)
    for m in manifests(out).values():
        assert sorted(e["trial"] for e in m["trials"]) == [0, 1]
        assert m["status"] == "complete"


def test_a_worker_killed_mid_trial_is_journaled_and_its_trial_runs_again(
        tmp_path: Path, cluster: None, sequential: Sequential) -> None:
    """One lane (a baseline and its speculative cell, 2 trials each), on the one GPU that a
    blocker leaves free. Its worker is killed once the second trial of round 0 has written
    one of its two records; a second blocker takes that GPU as it is freed, so the new worker
    gets another: it runs the round's first trial again before the lost one, and no pair
    spans two cards. ``sequential`` (the last test's reference) starts here and runs beside
    this test."""
    import ray

    from crossbench.runner.ray_exec import RayExecutor

    @ray.remote(num_cpus=0)
    class Blocker:
        """Holds GPUs of the test cluster."""

        def gpus(self) -> list[str]:
            return [str(g) for g in ray.get_runtime_context().get_accelerator_ids()["GPU"]]

    # 80 tokens at 25 ms: the trial's second request runs 2 s, well past the killer's 0.5 s
    # pause between seeing the first record and the kill (24 tokens raced it on a busy host)
    path = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=25, max_tokens=80)
    out = tmp_path / "run"
    three = Blocker.options(num_gpus=GPUS - 1).remote()  # type: ignore[attr-defined]
    free = sorted({str(g) for g in range(GPUS)} - set(ray.get(three.gpus.remote(),
                                                              timeout=60)))
    killed: dict[str, Any] = {}
    blockers = [three]
    stop = threading.Event()

    def killer() -> None:
        """Once round 0's first trial is journaled and its second has written one record:
        queue a blocker for a GPU, SIGKILL the lane's worker (the blocker gets its GPU),
        then free the other GPUs for the new worker."""
        while not stop.is_set() and not killed:
            servers = standin_servers()
            journal = out / "journal.jsonl"
            if servers and journal.exists() and journal.read_bytes().count(b"\n") == 1:
                counts = {f.parent.name: len(f.read_bytes().splitlines())
                          for f in (out / "cells").glob("*/requests.jsonl")}
                half = [name for name, n in counts.items() if n % 2]
                if half:
                    one = Blocker.options(num_gpus=1).remote()  # type: ignore[attr-defined]
                    blockers.append(one)
                    time.sleep(0.5)  # its request is queued before the new worker's
                    worker = next(iter(servers.values()))
                    os.kill(worker, signal.SIGKILL)
                    killed.update(worker=worker, servers=list(servers), cell_dir=half[0],
                                  blocked=ray.get(one.gpus.remote(), timeout=60))
                    ray.kill(three)
                    break
            time.sleep(0.05)

    def guarded() -> None:
        try:
            killer()
        except Exception as e:  # shown by the assertion below, not lost in the thread
            killed["error"] = repr(e)

    thread = threading.Thread(target=guarded, daemon=True)
    t0 = time.monotonic()
    thread.start()
    said: list[str] = []
    ticks: list[Any] = []
    try:
        s = run_matrix(path, out, progress=said.append, on_tick=ticks.append,
                       executor=RayExecutor(lane_gpus=1))
    finally:
        stop.set()
        thread.join(5)
        for b in blockers:
            ray.kill(b)
    _say("ray, one lane, a worker killed mid-trial", t0)
    assert "worker" in killed, killed or "no trial was seen with one of its records written"
    assert wait_gone([killed["worker"], *killed["servers"]]) == []  # its servers died with it
    assert s["totals"] == {"done": 4, "failed": 0, "missing": 0}
    lines = read_jsonl(out / "journal.jsonl")
    first, lost, rerun, retried, *rest = lines
    state = json.loads((out / "state.json").read_text())
    dirs = {c["id"]: c["dir"] for c in state["cells"]}
    assert dirs[lost["cell"]] == f"cells/{killed['cell_dir']}" and lost["trial"] == 0
    assert (lost["status"], lost["worker_lost"], lost["attempt"]) == ("failed", True, 1)
    assert lost["error"].startswith("worker lost: ")
    assert lost["worker"]["pid"] == killed["worker"]  # the line names the dead worker
    assert [first["worker"]["gpu_ids"], lost["worker"]["gpu_ids"]] == [free, free]
    assert killed["blocked"] == free  # the dead worker's GPU went to the blocker
    # the new worker runs on another GPU: round 0's first trial again, then the lost one
    assert (rerun["cell"], rerun["trial"], rerun["rerun"]) == (first["cell"], 0, "pairing")
    assert (retried["cell"], retried["trial"], retried["status"], retried["attempt"]) == \
        (lost["cell"], 0, "ok", 2)
    new_gpu = rerun["worker"]["gpu_ids"]
    assert new_gpu != free and retried["worker"]["gpu_ids"] == new_gpu
    assert rerun["worker"]["pid"] == retried["worker"]["pid"] != killed["worker"]
    assert [(r["trial"], r["status"], r["worker"]["gpu_ids"]) for r in rest] == \
        [(1, "ok", new_gpu), (1, "ok", new_gpu)]
    assert any("now runs on other GPUs" in m and "running them again here" in m for m in said)
    assert any("was lost" in m and f"attempt 2 of {LOST_RETRIES + 1}" in m for m in said)
    assert journal_set(out) == {(c["id"], t, "ok") for c in state["cells"] for t in range(2)}
    assert_no_duplicates(out, requests=2)  # the dead trial's record was dropped, and the
    # first run of the re-run trial with it
    assert all(k.failures == 0 for k in ticks)  # a lost attempt run again is no failure
    assert sum(1 for k in ticks if k.ended) == 5
    mans = manifests(out)
    base = next(c for c in state["cells"] if not c["baseline"])["id"]
    spec = next(c for c in state["cells"] if c["baseline"])["id"]
    assert split_occasions(mans[spec], mans[base]) == []  # no pair spans two cards
    assert {p["placement"]["cuda_visible_devices"] for m in (mans[base], mans[spec])
            for p in provenance(m).values()} == set(new_gpu)


def test_four_lanes_give_the_sequential_runners_records(
        tmp_path: Path, cluster: None, sequential: Sequential) -> None:
    from crossbench.runner.ray_exec import RayExecutor

    t0 = time.monotonic()
    said: list[str] = []
    ray_out = tmp_path / "ray"
    spread = run_matrix(sequential.matrix, ray_out, progress=said.append,
                        executor=RayExecutor(lane_gpus=1))
    _say("ray, 4 lanes on 4 logical GPUs", t0)
    local_out = sequential.wait()
    local = json.loads((local_out / "summary.json").read_text())
    assert local["totals"] == spread["totals"] == {"done": 16, "failed": 0, "missing": 0}
    assert records(ray_out) == records(local_out)
    assert len(records(ray_out)) == 8
    assert journal_set(ray_out) == journal_set(local_out)
    assert [(c["id"], c["done"], c["failed"]) for c in spread["cells"]] == \
        [(c["id"], c["done"], c["failed"]) for c in local["cells"]]
    assert f"ray: 1 node(s), {GPUS} GPU(s): up to 4 lane(s) at once, 1 GPU(s) each" in said
    lines = read_jsonl(ray_out / "journal.jsonl")
    assert len(lines) == 16 and all(r["attempt"] == 1 and "rerun" not in r for r in lines)
    gpu_of_lane: dict[str, set[str]] = {}
    for r in lines:
        w = r["worker"]
        assert w["executor"] == "ray" and w["node_id"] and w["pid"] > 0
        assert not {"host", "node_ip"} & set(w)  # nothing that names a machine
        assert len(w["gpu_ids"]) == 1 and w["cuda_visible_devices"] == w["gpu_ids"][0]
        gpu_of_lane.setdefault(w["lane"], set()).add(w["gpu_ids"][0])
    assert len(gpu_of_lane) == 4 and all(len(g) == 1 for g in gpu_of_lane.values())
    assert len(set().union(*gpu_of_lane.values())) == 4  # four lanes at once, one card each
    mans = manifests(ray_out)
    for r in lines:  # the trial's provenance names the card and node its journal line does
        prov = provenance(mans[r["cell"]])[r["trial"]]
        assert prov["placement"] == r["worker"]
        assert prov["env"]["CUDA_VISIBLE_DEVICES"] == r["worker"]["cuda_visible_devices"]
    for m in manifests(local_out).values():  # the local runner places nothing
        assert all("placement" not in p for p in provenance(m).values())
    state = json.loads((ray_out / "state.json").read_text())
    for c in state["cells"]:  # pairs never span cards
        if c["baseline"]:
            assert split_occasions(mans[c["id"]], mans[c["baseline"]]) == [], c["id"]
        summary = json.loads((ray_out / c["dir"] / "summary.json").read_text())
        assert summary["integrity"]["passed"] is True


def test_two_gpu_lanes_share_nothing_and_see_both_cards(tmp_path: Path, cluster: None) -> None:
    """The two-card study's placement (matrices/h200x2-cross.yaml runs with --lane-gpus 2):
    on 4 logical GPUs, lanes of 2 GPUs each (two at a time, as the executor reports); every
    trial of a lane sees the lane's two cards in CUDA_VISIBLE_DEVICES, and pairs stay on
    their pair of cards."""
    from crossbench.runner.ray_exec import RayExecutor

    m = write_matrix(tmp_path, targets=2, concurrency="1,2", step_ms=1)
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(m, out, progress=said.append, executor=RayExecutor(lane_gpus=2))
    assert s["totals"] == {"done": 16, "failed": 0, "missing": 0}
    assert f"ray: 1 node(s), {GPUS} GPU(s): up to 2 lane(s) at once, 2 GPU(s) each" in said
    lines = read_jsonl(out / "journal.jsonl")
    cards_of_lane: dict[str, set[str]] = {}
    for r in lines:
        w = r["worker"]
        assert len(w["gpu_ids"]) == 2
        assert sorted(w["cuda_visible_devices"].split(",")) == sorted(w["gpu_ids"])
        cards_of_lane.setdefault(w["lane"], set()).add(w["cuda_visible_devices"])
    assert len(cards_of_lane) == 4 and all(len(v) == 1 for v in cards_of_lane.values())
    mans = manifests(out)
    state = json.loads((out / "state.json").read_text())
    for c in state["cells"]:
        if c["baseline"]:  # a pair never spans two pairs of cards
            assert split_occasions(mans[c["id"]], mans[c["baseline"]]) == [], c["id"]


def test_sequential_stopping_on_ray_lanes(tmp_path: Path, cluster: None) -> None:
    """The driver consults the sequential rule as trials end: a clearly faster cell stops
    early on its lane, its baseline with it, recorded in stops.jsonl by the driver alone."""
    from crossbench.runner.ray_exec import RayExecutor
    from crossbench.runner.stopping import read_stops

    m = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=3, requests=3,
                     max_tokens=48)
    doc = yaml.safe_load(m.read_text())
    doc["trials"], doc["sequential"] = 8, {"min_trials": 3}
    doc["axes"]["workload"] = ["builtin:mixed"]  # several prompt categories per trial
    doc["arms"][1]["synth_rates"] = [0.95, 0.9]
    m.write_text(yaml.safe_dump(doc))
    out = tmp_path / "run"
    s = run_matrix(m, out, executor=RayExecutor(lane_gpus=1))
    stops = read_stops(out)
    (spec,) = [c for c, r in stops.items() if r.get("baseline")]
    assert stops[spec]["action"] == "faster" and 3 <= stops[spec]["look"] < 8
    assert s["totals"]["missing"] == 0 and s["totals"]["stopped"] > 0
    ran = sorted(t for (c, t) in read_journal(out) if c == spec)
    assert ran == list(range(stops[spec]["look"]))


def test_probe_and_predict_on_ray_lanes(tmp_path: Path, cluster: None) -> None:
    """Probe-and-predict runs its two phases as two jobs of one Ray executor: the probes
    and baseline first, then only the cells the decisions left to measure."""
    from crossbench.runner.ray_exec import RayExecutor
    from crossbench.store.rundir import read_predictions

    m = write_matrix(tmp_path, targets=1, concurrency="1", step_ms=4, requests=4,
                     max_tokens=48)
    doc = yaml.safe_load(m.read_text())
    doc["trials"], doc["probe_predict"] = 3, {"probes": 3, "holdout": 1}
    doc["axes"]["workload"] = ["builtin:mixed"]
    doc["arms"][1] = {"name": "synth", "method": "ngram", "n": "1-4,6,8", "synth_alpha": 0.8}
    m.write_text(yaml.safe_dump(doc))
    out = tmp_path / "run"
    s = run_matrix(m, out, executor=RayExecutor(lane_gpus=1))
    decided = read_predictions(out)
    assert sorted(r["n"] for r in decided.values()) == [2, 3, 6]
    ran = {c for c, _ in read_journal(out)}
    for cid, r in decided.items():
        assert (cid in ran) == (r["action"] != "predict"), r
    assert s["totals"]["missing"] == 0
    assert s["totals"].get("predicted", 0) == 3 * sum(
        r["action"] == "predict" for r in decided.values())
