"""`crossbench archive RUN_DIR --out DIR`: the folder and the deterministic zip, the metadata
files rendered from zenodo/ templates, licences, side archives, and refusing secrets."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from standins.study import Arm, study

from crossbench.archive.metadata import Creator, orcid_ok
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.paths import repo_root

PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(9)]
ACC = {"drafts": 900, "draft_tokens": 1800, "accepted": 1200, "per_position": [700, 500]}
CREATOR = "Doe, Jane;Example Lab;0000-0002-1825-0097"


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 100.0 + 10 * arm.n + int(pid[1:])


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=2)
    assert invoke("analyze", str(out), "--resamples", "500").exit_code == 0
    cell = out / json.loads((out / "state.json").read_text())["cells"][1]["dir"]
    (cell / "server.log").write_text("llama-server log line\n" * 2000)  # 44 kB
    return out


def archive(run_dir: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return invoke("archive", str(run_dir), "--out", str(out), "--creator", CREATOR,
                  "--title", "Synthetic study", *extra)


def test_two_builds_give_the_same_bytes(run_dir: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        r = archive(run_dir, tmp_path / name, "--split-logs-over", "10kB")
        assert r.exit_code == 0, r.output
    for zname in ("import-synthetic.zip", "import-synthetic-logs.zip"):
        a = (tmp_path / "a" / zname).read_bytes()
        assert a == (tmp_path / "b" / zname).read_bytes(), zname
    assert r.stdout.splitlines() == [str(tmp_path / "b" / "import-synthetic.zip"),
                                     str(tmp_path / "b" / "import-synthetic-logs.zip")]


def test_zip_entries_sorted_dated_and_0644(run_dir: Path, tmp_path: Path) -> None:
    assert archive(run_dir, tmp_path / "o").exit_code == 0
    folder = tmp_path / "o" / "import-synthetic"
    with zipfile.ZipFile(tmp_path / "o" / "import-synthetic.zip") as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {(i.external_attr >> 16) & 0o777 for i in infos} == {0o644}
        on_disk = sorted(f"import-synthetic/{p.relative_to(folder).as_posix()}"
                         for p in folder.rglob("*") if p.is_file())
        assert names == on_disk
        for n in names:
            assert zf.read(n) == (tmp_path / "o" / n).read_bytes()


def test_archive_contents(run_dir: Path, tmp_path: Path) -> None:
    r = archive(run_dir, tmp_path / "o", "--related",
                "https://github.com/ggml-org/llama.cpp/pull/12345", "--keyword", "CPU")
    assert r.exit_code == 0, r.output
    root = tmp_path / "o" / "import-synthetic"
    for rel in ("data/state.json", "data/analysis.json", "data/analysis/verdicts.md",
                "report/report.html", "report/report.md", "report/datapoint.md",
                "scripts/reanalyze.sh", "scripts/reproduce.sh", "README.md", "CITATION.cff",
                ".zenodo.json", "ro-crate-metadata.json", "MANIFEST.json", "SHA256SUMS"):
        assert (root / rel).is_file(), rel
    cells = json.loads((run_dir / "state.json").read_text())["cells"]
    for c in cells:
        for f in ("manifest.json", "requests.jsonl", "summary.json"):
            assert (root / "data" / c["dir"] / f).read_bytes() == \
                (run_dir / c["dir"] / f).read_bytes()
    z = json.loads((root / ".zenodo.json").read_text())
    assert z["upload_type"] == "dataset"
    assert z["title"] == "Synthetic study"
    assert z["creators"] == [{"name": "Doe, Jane", "affiliation": "Example Lab",
                              "orcid": "0000-0002-1825-0097"}]
    assert z["license"] == "cc-by-4.0" and z["version"] == "1"
    assert {"speculative decoding", "crossbench", "draft-simple", "CPU"} <= set(z["keywords"])
    assert z["related_identifiers"] == [{"identifier":
                                         "https://github.com/ggml-org/llama.cpp/pull/12345",
                                         "relation": "isSupplementTo"}]
    assert z["description"].startswith("<p>import:synthetic: 1 speculative configuration(s)")
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "dataset"
    assert cff["authors"] == [{"family-names": "Doe", "given-names": "Jane",
                               "affiliation": "Example Lab",
                               "orcid": "https://orcid.org/0000-0002-1825-0097"}]
    assert cff["license"] == "CC-BY-4.0"
    readme = (root / "README.md").read_text()
    assert readme.startswith("# Synthetic study\n")
    for text in ("## What each file is", "`data/**/requests.jsonl`", "## Re-run the analysis",
                 "crossbench analyze reanalysis --resamples 500 --seed 0",
                 "crossbench archive verify .", "Everything in this archive is licensed "
                 "CC-BY-4.0"):
        assert text in readme, text


def test_ro_crate_lists_every_file(run_dir: Path, tmp_path: Path) -> None:
    assert archive(run_dir, tmp_path / "o").exit_code == 0
    root = tmp_path / "o" / "import-synthetic"
    crate = json.loads((root / "ro-crate-metadata.json").read_text())
    assert crate["@context"] == "https://w3id.org/ro/crate/1.1/context"
    graph = {e["@id"]: e for e in crate["@graph"]}
    assert graph["ro-crate-metadata.json"]["conformsTo"] == {"@id":
                                                            "https://w3id.org/ro/crate/1.1"}
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    entities = sorted(k for k, e in graph.items() if e.get("@type") == "File")
    assert entities == [f for f in files if f != "ro-crate-metadata.json"]
    assert sorted(p["@id"] for p in graph["./"]["hasPart"]) == entities
    sums = (root / "SHA256SUMS").read_text().splitlines()
    assert [ln.split("  ", 1)[1] for ln in sums] == [f for f in files if f != "SHA256SUMS"]


def test_separate_data_and_code_licences(run_dir: Path, tmp_path: Path) -> None:
    r = archive(run_dir, tmp_path / "o", "--data-license", "CC0-1.0", "--code-license", "MIT")
    assert r.exit_code == 0, r.output
    root = tmp_path / "o" / "import-synthetic"
    assert yaml.safe_load((root / "CITATION.cff").read_text())["license"] == ["CC0-1.0", "MIT"]
    assert json.loads((root / ".zenodo.json").read_text())["license"] == "cc0-1.0"
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["licences"] == {"data": "CC0-1.0", "code": "MIT", "code_paths": ["scripts/"]}
    graph = {e["@id"]: e for e in json.loads((root / "ro-crate-metadata.json").read_text())
             ["@graph"]}
    assert graph["./"]["license"] == {"@id": "https://spdx.org/licenses/CC0-1.0"}
    assert graph["scripts/reanalyze.sh"]["license"] == {"@id": "https://spdx.org/licenses/MIT"}
    assert "license" not in graph["data/analysis.json"]
    assert "- Code (`scripts/`): MIT" in (root / "README.md").read_text()


def test_side_archive_listed_with_checksums(run_dir: Path, tmp_path: Path) -> None:
    assert archive(run_dir, tmp_path / "o", "--split-logs-over", "10kB").exit_code == 0
    root = tmp_path / "o" / "import-synthetic"
    assert not list((root / "data").rglob("server.log"))
    (side,) = json.loads((root / "MANIFEST.json").read_text())["side_archives"]
    assert side["name"] == "import-synthetic-logs.zip"
    (entry,) = side["files"]
    assert entry["path"].endswith("/server.log") and entry["bytes"] == 44000
    import hashlib
    with zipfile.ZipFile(tmp_path / "o" / side["name"]) as zf:
        data = zf.read(f"import-synthetic/{entry['path']}")
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert hashlib.sha256((tmp_path / "o" / side["name"]).read_bytes()).hexdigest() == \
        side["sha256"]


def test_refuses_a_run_dir_holding_a_secret(run_dir: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cell = json.loads((run_dir / "state.json").read_text())["cells"][0]["dir"]
    log = run_dir / cell / "server.log"
    log.write_text("start\nauth with hf_" + "A" * 34 + "\n")
    r = archive(run_dir, tmp_path / "o")
    assert r.exit_code == 2
    assert f"{cell}/server.log:2: a Hugging Face token pattern" in r.stderr
    assert "hf_AAAA" not in r.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    log.write_text("token s3cr3t-v4lue here\n")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "s3cr3t-v4lue")
    r = archive(run_dir, tmp_path / "o2")
    assert r.exit_code == 2
    assert f"{cell}/server.log:1: the value of $MY_SERVICE_TOKEN" in r.stderr
    assert "s3cr3t-v4lue" not in r.stderr


def test_user_errors(run_dir: Path, tmp_path: Path) -> None:
    r = invoke("archive", str(run_dir), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "Missing option '--creator'" in r.stderr
    r = invoke("archive", str(run_dir), "--out", str(tmp_path / "o"), "--creator",
               "Doe, Jane;Lab;0000-0002-1825-0098")
    assert r.exit_code == 2
    assert "'0000-0002-1825-0098' is not a valid ORCID iD" in r.stderr
    r = archive(run_dir, tmp_path / "o", "--data-license", "CC BY")
    assert r.exit_code == 2 and "--data-license 'CC BY' is not an SPDX" in r.stderr
    r = archive(run_dir, tmp_path / "o", "--related", "https://x.org/1;likes")
    assert r.exit_code == 2 and "is not 'URL' or 'URL;relation'" in r.stderr
    assert archive(run_dir, tmp_path / "o").exit_code == 0
    r = archive(run_dir, tmp_path / "o")
    assert r.exit_code == 2 and "already exists" in r.stderr


def test_edited_templates(run_dir: Path, tmp_path: Path) -> None:
    tpl = tmp_path / "tpl"
    tpl.mkdir()
    for f in (repo_root() / "zenodo").glob("*.tmpl"):
        (tpl / f.name).write_text(f.read_text())
    readme = tpl / "README.md.tmpl"
    readme.write_text("# $title\n\nOur lab's study. Contact: lab@example.org. Cost: $$0.\n")
    r = archive(run_dir, tmp_path / "o", "--templates", str(tpl))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "import-synthetic" / "README.md").read_text() == \
        "# Synthetic study\n\nOur lab's study. Contact: lab@example.org. Cost: $0.\n"
    readme.write_text("# $title by $HOME\n")
    r = archive(run_dir, tmp_path / "o2", "--templates", str(tpl))
    assert r.exit_code == 2
    assert "README.md.tmpl uses $HOME, which is not a known placeholder" in r.stderr
    assert list((tmp_path / "o2").iterdir()) == []  # nothing half-built is left
    (tpl / "zenodo.json.tmpl").write_text('{"title": $title_json,}')
    readme.write_text("# $title\n")
    r = archive(run_dir, tmp_path / "o3", "--templates", str(tpl))
    assert r.exit_code == 2 and "zenodo.json.tmpl does not render to JSON" in r.stderr


def test_creator_names_and_orcid_check_digit() -> None:
    assert Creator.parse("Jane Q. Doe").zenodo() == {"name": "Doe, Jane Q."}
    assert Creator.parse("Doe, Jane;;").zenodo() == {"name": "Doe, Jane"}
    assert Creator.parse("Lab Team;;https://orcid.org/0000-0002-1694-233X").orcid == \
        "0000-0002-1694-233X"
    assert orcid_ok("0000-0002-1825-0097") and not orcid_ok("0000-0002-1825-0096")
    with pytest.raises(UserError):
        Creator.parse(";Lab")
