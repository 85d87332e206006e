"""`crossbench archive verify PATH`: checksums, schema versions, re-derivation of every number
of analysis.json, secrets; exit 1 naming the offending file and line."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study

from crossbench.archive.verify import differences, value_lines
from crossbench.cli.main import cli

PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(9)]
ACC = {"drafts": 900, "draft_tokens": 1800, "accepted": 1200, "per_position": [700, 500]}


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 100.0 + 10 * arm.n + int(pid[1:])


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive (folder, zip, side zip of logs) of a synthetic sweep; tests copy it."""
    tmp = tmp_path_factory.mktemp("verify")
    run = tmp / "study"
    study(run, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC),
                         Arm("dft", "draft-simple", 3, acceptance=ACC)], rate, trials=2)
    assert invoke("analyze", str(run), "--resamples", "500").exit_code == 0
    for c in json.loads((run / "state.json").read_text())["cells"]:
        (run / c["dir"] / "server.log").write_text(f"log of {c['id']}\n" * 1000)
    r = invoke("archive", str(run), "--out", str(tmp / "out"), "--creator", "Doe, Jane",
               "--split-logs-over", "1kB", "--name", "sweep")
    assert r.exit_code == 0, r.output
    return tmp / "out"


@pytest.fixture
def out(built: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "out"
    shutil.copytree(built, dest)
    return dest


def reseal(folder: Path) -> None:
    """Recompute SHA256SUMS and MANIFEST.json as a careless (or dishonest) editor would."""
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    for f in manifest["files"]:
        f["sha256"] = hashlib.sha256((folder / f["path"]).read_bytes()).hexdigest()
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    lines = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and rel != "SHA256SUMS":
            lines.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {rel}\n")
    (folder / "SHA256SUMS").write_text("".join(lines))


def problems(r) -> list[str]:  # type: ignore[no-untyped-def]
    return [ln for ln in r.stdout.splitlines() if not ln.startswith("  ")
            and not ln.endswith(": verified")]


def test_a_fresh_archive_verifies(out: Path) -> None:
    for target in (out / "sweep.zip", out / "sweep", out):
        r = invoke("archive", "verify", str(target))
        assert r.exit_code == 0, r.output
        assert r.stdout.splitlines() == [
            "  ok    checksums: 38 files match SHA256SUMS",
            "  ok    side archives: 1 of 1 present and checked",
            "  ok    schema versions: 6 versioned files readable",
            "  ok    analysis re-derives: 2 pairs, 3 cells, 1 sweep (500 resamples, seed 0), "
            "every number within 1e-09 relative",
            "  ok    no secrets: no token pattern, no secret flag's value, no secret "
            "variable's value of this environment, no key a run declared",
            f"{target}: verified"]


def test_tampered_raw_file(out: Path) -> None:
    state = json.loads((out / "sweep" / "data" / "state.json").read_text())
    rel = f"data/{state['cells'][1]['dir']}/requests.jsonl"
    path = out / "sweep" / rel
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    rec["t_done_ns"] += 50_000_000  # one request finished 50 ms later
    rec["chunks"][-1][0] += 50_000_000
    lines[3] = json.dumps(rec, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    r = invoke("archive", "verify", str(out / "sweep"))
    assert r.exit_code == 1
    found = problems(r)
    assert f"{rel}: sha256 differs from SHA256SUMS line " in found[0]
    # resealed, the checksums pass but the numbers no longer re-derive
    reseal(out / "sweep")
    r = invoke("archive", "verify", str(out / "sweep"))
    assert r.exit_code == 1
    assert "  FAIL  analysis re-derives:" in r.stdout
    first = problems(r)[0]
    assert re.match(r"data/analysis\.json:\d+: pairs\[synthetic/synthetic-model/dft/n2/"
                    r"synthetic/c1\]\.speedup\.geomean is [0-9.]+ but the raw records give ",
                    first), first
    assert r.stderr.startswith(f"crossbench: failed: {out / 'sweep'}: ")


def test_hand_edited_speedup_is_named_with_its_line(out: Path) -> None:
    path = out / "sweep" / "data" / "analysis.json"
    text = path.read_text()
    obj = json.loads(text)
    pair = obj["pairs"][1]
    old = pair["speedup"]["geomean"]
    needle = f'"geomean": {json.dumps(old)}'
    start = text.index(f'"cell": "{pair["cell"]}"')
    pos = text.index(needle, text.index('"speedup": {', text.rindex("\n    {", 0, start)))
    line = text.count("\n", 0, pos) + 1
    path.write_text(text[:pos] + '"geomean": 1.5' + text[pos + len(needle):])
    reseal(out / "sweep")
    r = invoke("archive", "verify", str(out / "sweep"))
    assert r.exit_code == 1
    assert problems(r) == [f"data/analysis.json:{line}: pairs[{pair['cell']}].speedup.geomean "
                           f"is 1.5 but the raw records give {json.dumps(old)}"]


def test_planted_token_named_with_file_and_line(out: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    folder = out / "sweep"
    md = folder / "report" / "report.md"
    lines = md.read_text().splitlines(keepends=True)
    lines.insert(4, "uploaded with hf_abcdefghijklmnopqrstuvwxyz0123456\n")
    md.write_text("".join(lines))
    readme = folder / "README.md"
    readme.write_text(readme.read_text() + "ZENODO_TOKEN=" + "Zq9" * 20 + "\n")
    n_readme = readme.read_text().count("\n")
    monkeypatch.setenv("LAB_UPLOAD_TOKEN", "p1ant3d-v4lue")
    table = folder / "data" / "analysis" / "verdicts.md"
    line = table.read_text().count("\n") + 1
    table.write_text(table.read_text() + "computed by p1ant3d-v4lue\n")
    reseal(folder)
    r = invoke("archive", "verify", str(folder), "--no-reanalysis")
    assert r.exit_code == 1
    assert problems(r) == [
        f"README.md:{n_readme}: a bearer or access token (Zenodo-like) pattern",
        f"data/analysis/verdicts.md:{line}: the value of $LAB_UPLOAD_TOKEN",
        "report/report.md:5: a Hugging Face token pattern"]
    assert "p1ant3d-v4lue" not in r.output and "hf_abcdef" not in r.output


def test_planted_api_key_flag_named_with_file_and_line(out: Path) -> None:
    """`--api-key VALUE` in clear, on a command line or in a manifest's argv list (one item
    per line, as indented JSON writes it), is a finding; `--api-key <redacted>` is not."""
    folder = out / "sweep"
    state = json.loads((folder / "data" / "state.json").read_text())
    rel = f"data/{state['cells'][0]['dir']}/manifest.json"
    manifest = json.loads((folder / rel).read_text())
    manifest["argv"] = ["crossbench", "run", "--server-arg=--api-key",
                        "--server-arg=<redacted>"]
    manifest["trials"][0]["argv"] = ["llama-server", "--api-key", "abc123def", "--port", "1"]
    (folder / rel).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    line = (folder / rel).read_text().splitlines().index('        "abc123def",') + 1
    md = folder / "report" / "report.md"
    md.write_text(md.read_text() + "server: llama-server --api-key abc123def\n"
                  "redacted: llama-server --api-key <redacted>\n")
    n = md.read_text().count("\n") - 1
    reseal(folder)
    r = invoke("archive", "verify", str(folder), "--no-reanalysis")
    assert r.exit_code == 1
    assert problems(r) == [
        f"{rel}:{line}: a secret flag's value (the list item after the flag)",
        f"report/report.md:{n}: a secret flag's value (--flag VALUE)"]
    assert "abc123def" not in r.output


def test_token_in_the_zip_and_in_the_side_archive(out: Path) -> None:
    zpath = out / "sweep.zip"
    with zipfile.ZipFile(zpath) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(zpath, "w") as zf:
        for info, data in items:
            if info.filename == "sweep/report/datapoint.md":
                data += b"ghp_" + b"x1" * 20 + b"\n"
            zf.writestr(info, data)
    side = out / "sweep-logs.zip"
    with zipfile.ZipFile(side) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(side, "w") as zf:
        for info, data in items:
            zf.writestr(info, data.replace(b"log of", b"hf_" + b"k" * 32, 1))
    r = invoke("archive", "verify", str(zpath), "--no-reanalysis")
    assert r.exit_code == 1
    found = problems(r)
    assert "report/datapoint.md: sha256 differs from SHA256SUMS line" in found[0]
    assert "sweep-logs.zip: sha256 differs from MANIFEST.json" in found
    assert any(re.fullmatch(r"sweep-logs\.zip:data/cells/.+/server\.log: sha256 differs from "
                            r"MANIFEST\.json", p) for p in found)
    assert any(re.fullmatch(r"sweep-logs\.zip:data/cells/.+/server\.log:1: a Hugging Face "
                            r"token pattern", p) for p in found)
    n = (out / "sweep" / "report" / "datapoint.md").read_text().count("\n") + 1
    assert f"report/datapoint.md:{n}: a GitHub token pattern" in found


def test_schema_version_from_the_future(out: Path) -> None:
    path = out / "sweep" / "data" / "state.json"
    path.write_text(path.read_text().replace('"schema_version": 1', '"schema_version": 9'))
    reseal(out / "sweep")
    r = invoke("archive", "verify", str(out / "sweep"), "--no-reanalysis")
    assert r.exit_code == 1
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1)
                if '"schema_version"' in x)
    assert problems(r) == [f"data/state.json:{line}: state schema_version 9; this crossbench "
                           "reads 1 (upgrade crossbench)"]


def test_missing_unlisted_and_unsafe(out: Path, tmp_path: Path) -> None:
    folder = out / "sweep"
    (folder / "data" / "journal.txt").write_text("extra\n")
    (folder / "scripts" / "reproduce.sh").unlink()
    r = invoke("archive", "verify", str(folder), "--no-reanalysis")
    assert r.exit_code == 1
    found = problems(r)
    assert "data/journal.txt: not listed in SHA256SUMS" in found
    assert any(p.startswith("scripts/reproduce.sh: listed in SHA256SUMS (line ") for p in found)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../evil.txt", "x")
    r = invoke("archive", "verify", str(bad))
    assert r.exit_code == 2 and "holds an unsafe path '../evil.txt'" in r.stderr
    (out / "sweep-logs.zip").unlink()
    r = invoke("archive", "verify", str(out / "sweep.zip"), "--no-reanalysis")
    assert r.exit_code == 0
    assert "  note  side archive sweep-logs.zip is not beside the archive: its 3 files were " \
           "not checked" in r.stdout


def test_value_lines_and_differences() -> None:
    text = json.dumps({"pairs": [{"cell": "a", "speedup": {"ci95": [0.9, 1.1]}}],
                       "run": {"dir": "/x"}}, indent=2)
    lines = value_lines(text)
    assert lines[("pairs", 0, "speedup", "ci95", 1)] == 8
    derived = {"pairs": [{"cell": "a", "speedup": {"ci95": [0.9, 1.1 + 1e-13]}}],
               "run": {"dir": "/elsewhere"}}
    assert list(differences(json.loads(text), derived)) == []
    derived["pairs"][0]["speedup"]["ci95"][0] = 0.8
    assert list(differences(json.loads(text), derived)) == [
        (("pairs", 0, "speedup", "ci95", 0), 0.9, 0.8)]


def test_broken_files_are_problems_not_crashes(out: Path) -> None:
    folder = out / "sweep"
    state = json.loads((folder / "data" / "state.json").read_text())
    records = folder / "data" / state["cells"][0]["dir"] / "requests.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join([lines[0], "{not json\n", *lines[2:]]))
    r = invoke("archive", "verify", str(folder))
    assert r.exit_code == 1
    # the reader names the file and line of the damaged record
    assert any(p.startswith("data: the raw files do not analyse: UserError: ")
               and "requests.jsonl line 2 is not valid JSON" in p for p in problems(r)), \
        problems(r)
    rel = f"data/{state['cells'][2]['dir']}/manifest.json"
    (folder / rel).write_text("{")
    r = invoke("archive", "verify", str(folder))
    assert r.exit_code == 1
    found = problems(r)
    assert any(p.startswith(f"{rel}:1: not JSON: ") for p in found)
    assert any(p.startswith("data: the raw files do not analyse: UserError: cannot read ")
               for p in found)


def test_an_older_format_is_compared_on_what_it_defines_alike():
    from crossbench.archive.verify import differences, not_compared

    redefined = {2: ("throughput.server_pooled_tok_s", "per_trial.*.throughput.server_pooled_tok_s")}
    old = {"schema_version": 1, "throughput": {"pooled_tok_s": 10.0, "server_pooled_tok_s": 10.1},
           "per_trial": [{"throughput": {"server_pooled_tok_s": 9.0}}]}
    new = {"schema_version": 2, "throughput": {"pooled_tok_s": 10.0, "server_pooled_tok_s": 10.0,
                                               "client_vs_server": 0.0},
           "per_trial": [{"throughput": {"server_pooled_tok_s": 8.9}}]}
    skip = not_compared(1, 2, redefined)
    assert list(differences(old, new, skip=skip)) == []  # redefined and added: not compared
    old["throughput"]["pooled_tok_s"] = 11.0  # a figure both versions define alike
    assert [p for p, _, _ in differences(old, new, skip=skip)] == [("throughput",
                                                                    "pooled_tok_s")]
    # a file of the current version is compared on everything
    same = not_compared(2, 2, redefined)
    assert ("schema_version",) in [p for p, _, _ in differences(old, new, skip=same)]
