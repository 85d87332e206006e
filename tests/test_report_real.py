"""Report, datapoint and archive of a real CPU study (baseline and draft-simple at n=2 and n=4
on the real llama-server, 2 interleaved trials), and the HTML report opened in headless
Chromium with the network blocked.

Run it under the shared lock so it never overlaps another llama-server on the machine:
``flock /tmp/crossbench-cpu.lock python3 -m pytest -q tests/test_report_real.py``.
Chromium comes from Debian's ``chromium`` package (``apt-get install chromium``).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from PIL import Image

from crossbench.cli.main import cli
from crossbench.runner.matrix_run import run_matrix

pytestmark = pytest.mark.server

SPEC = "llama/t/draft-simple/n{}/builtin-mixed/c1"
BASE = "llama/t/none/builtin-mixed/c1"


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def real_run(llama_server: Path, fixture_models: tuple[Path, Path],
             tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished, analysed matrix run on the real CPU llama-server."""
    tmp = tmp_path_factory.mktemp("real")
    matrix = tmp / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "schema_version": 1, "study": {"name": "report-e2e", "notes": "tiny CPU study"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(llama_server)}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                   "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
        "server": {"ctx_size": 1024},
        "load": {"requests": 4, "warmup": 1, "max_tokens": 32, "temperature": 0.0,
                 "ignore_eos": True},
        "arms": [{"method": "none"}, {"method": "draft-simple", "draft": "d", "n": "2,4"}],
        "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:mixed"]},
        "trials": 2,
    }))
    out = tmp / "run"
    run_matrix(matrix, out)
    r = invoke("analyze", str(out), "--min-samples", "4", "--resamples", "2000")
    assert r.exit_code == 0, r.output
    return out


def test_report_of_a_real_run(real_run: Path) -> None:
    r = invoke("report", str(real_run))
    assert r.exit_code == 0, r.output
    html = (real_run / "report" / "report.html").read_text()
    analysis = json.loads((real_run / "analysis.json").read_text())
    manifest = json.loads((real_run / "cells" / "llama__t__draft-simple__n2__builtin-mixed__c1"
                           / "manifest.json").read_text())
    prov = manifest["trials"][0]["provenance"]
    assert len(analysis["pairs"]) == 2
    for p in analysis["pairs"]:
        assert f"draft-simple n={p['n']}" in html
        assert f"{p['speedup']['geomean']:.3f}" in html
        marked = p["verdict"] + ("*" if p.get("verdict_caveats") else "")
        assert f'<span class="badge {p["verdict"]}">{marked}</span>' in html
    assert prov["models"]["model"]["sha256"] in html  # models with their hashes
    assert f"build {prov['engine']['build_number']}" in html
    assert html.count('src="data:image/svg+xml;base64,') == 3  # CPU: no telemetry samples
    assert "No failed trial." in html
    assert "crossbench matrix matrix.yaml --out runs/repro" in html
    assert " ".join(shlex.quote(a) for a in manifest["trials"][0]["argv"]) in html
    md = (real_run / "report" / "report.md").read_text()  # every start, by its trial
    starts = md.split("## Server starts", 1)[1].split("\n## ", 1)[0]
    up = manifest["trials"][0]["phase_s"]["startup"]
    assert f"| draft-simple n=2 | 0 | {up:.1f} | n/a | n/a | n/a |" in starts
    assert starts.count("| n/a | n/a | n/a |") == 6  # 3 cells x 2 fresh starts; no vLLM lines


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("headless Chromium is needed to check the HTML report: install Debian's "
                    "package with `apt-get install chromium`")
    return found


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for (Chromium's own background traffic is left out: the
    page's requests carry the file:// network isolation key)."""
    log = json.loads(netlog.read_text())
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for e in log["events"]:
        params = e.get("params") or {}
        if types.get(e["type"]) == "URL_REQUEST_START_JOB" and \
                str(params.get("network_isolation_key", "")).startswith("file://"):
            urls.append(str(params["url"]))
    return urls


def _open(page: Path, tmp: Path, name: str) -> tuple[Path, list[str]]:
    shot, netlog = tmp / f"{name}.png", tmp / f"{name}-netlog.json"
    cmd = [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
           f"--user-data-dir={tmp / (name + '-profile')}", "--window-size=1280,3000",
           f"--screenshot={shot}", "--virtual-time-budget=2000",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--disable-background-networking", "--disable-component-update",
           "--disable-extensions", "--disable-sync", f"--log-net-log={netlog}",
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return shot, _page_requests(netlog)


def test_html_report_in_headless_chromium_without_network(real_run: Path,
                                                           tmp_path: Path) -> None:
    invoke("report", str(real_run), "--out", str(tmp_path / "rep"))
    # the check itself works: a page with an external image is caught
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="https://example.org/x.png">x</body></html>')
    _, requested = _open(control, tmp_path, "control")
    assert requested == ["https://example.org/x.png"]

    shot, requested = _open(tmp_path / "rep" / "report.html", tmp_path, "report")
    assert requested == []
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 3000)
    colors = img.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 500  # not blank: text, tables, figures
    # the figures are drawn: matplotlib's first two series colours fill many pixels
    px = img.load()
    assert px is not None

    def count(rgb: tuple[int, int, int]) -> int:
        return sum(n for n, c in colors if all(abs(a - b) <= 12 for a, b in zip(c, rgb,
                                                                                 strict=True)))

    assert count((0x1F, 0x77, 0xB4)) > 300  # tab:blue lines, markers, CI bands' edges
    assert count((0xFF, 0x7F, 0x0E)) > 150  # tab:orange: the second configuration
    assert shot.parent == tmp_path  # kept out of the repository


def test_datapoint_of_a_real_run(real_run: Path) -> None:
    r = invoke("datapoint", str(real_run))
    assert r.exit_code == 0, r.output
    text = r.stdout
    lines = text.splitlines()
    assert len(lines) < 60
    analysis = json.loads((real_run / "analysis.json").read_text())
    cells = {p["cell"]: p for p in analysis["pairs"]}
    rows = [ln for ln in lines if ln.startswith("| draft-simple")]
    assert len(rows) == 2
    for n, row in zip((2, 4), rows, strict=True):
        p = cells[SPEC.format(n)]
        assert row.startswith(f"| draft-simple n={n} | {p['speedup']['geomean']:.3f} "
                              f"[{p['speedup']['ci95'][0]:.3f}, {p['speedup']['ci95'][1]:.3f}]"
                              f" | {p['verdict']}{'*' if p.get('verdict_caveats') else ''} | "
                              f"{p['acceptance']['draft_acceptance_rate']:.3f} |")
    man = json.loads((real_run / "cells" / "llama__t__none__builtin-mixed__c1" /
                      "manifest.json").read_text())
    prov = man["trials"][0]["provenance"]
    assert f"- **GPU**: none: {prov['gpu']['reason']}; CPU " in text
    assert f"build {prov['engine']['build_number']} commit {prov['engine']['commit']}" in text
    assert f"sha256 {prov['models']['model']['sha256'][:12]})" in text
    assert "- **Flags**: `--ctx-size 1024 --parallel 1 --metrics --no-webui` (both arms)" in text
    assert " ".join(shlex.quote(a) for a in man["trials"][0]["argv"]) in lines
    assert "crossbench matrix matrix.yaml --out runs/repro" in lines
    assert "crossbench analyze runs/repro --resamples 2000 --seed 0 --level 0.95 " \
           "--min-samples 4" in lines
    # the caveats are those the analysis raised: no confound on one machine and one build;
    # two CPU trials can disagree when the machine is busy (starts_disagree), and then say so
    if any(w["kind"] == "starts_disagree" for p in analysis["pairs"] for w in p["warnings"]):
        assert "**Caveats (confound check)**: " in lines
        assert any(ln.startswith("- starts disagree: with each server start as one sample")
                   for ln in lines)
    else:
        assert "**Caveats (confound check)**: none raised" in lines
    assert re.search(r"https://doi\.org/10\.5281/zenodo\.X+", lines[-1])
    one = invoke("datapoint", str(real_run), "--cells", SPEC.format(4))
    assert [ln[:19] for ln in one.stdout.splitlines() if ln.startswith("| draft")] == \
        ["| draft-simple n=4 "]
    assert "crossbench matrix matrix.yaml --out runs/repro --skip n=2" in one.stdout


def test_archive_of_a_real_run_verifies_and_rederives(real_run: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        r = invoke("archive", str(real_run), "--out", str(tmp_path / name), "--creator",
                   "Doe, Jane;Example Lab", "--data-license", "CC0-1.0", "--code-license",
                   "MIT")
        assert r.exit_code == 0, r.output
    za, zb = tmp_path / "a" / "report-e2e.zip", tmp_path / "b" / "report-e2e.zip"
    assert za.read_bytes() == zb.read_bytes()
    r = invoke("archive", "verify", str(za))
    assert r.exit_code == 0, r.output
    assert "  ok    analysis re-derives: 2 pairs, 3 cells, 1 sweep (2000 resamples, seed 0)" \
        in r.stdout
    # a hand-edited speedup is caught even when the checksums are redone
    folder = tmp_path / "a" / "report-e2e"
    path = folder / "data" / "analysis.json"
    obj = json.loads(path.read_text())
    old = obj["pairs"][0]["speedup"]["geomean"]
    text = path.read_text()
    needle = f'"geomean": {json.dumps(old)}'
    pos = text.index(needle)
    path.write_text(text[:pos] + '"geomean": 1.25' + text[pos + len(needle):])
    sums = folder / "SHA256SUMS"
    import hashlib
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums.write_text(re.sub(r"^[0-9a-f]{64}  data/analysis\.json$",
                           f"{digest}  data/analysis.json", sums.read_text(), flags=re.M))
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    for f in manifest["files"]:
        if f["path"] == "data/analysis.json":
            f["sha256"] = digest
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    r = invoke("archive", "verify", str(folder))
    assert r.exit_code == 1
    line = text.count("\n", 0, pos) + 1
    assert f"data/analysis.json:{line}: pairs[{obj['pairs'][0]['cell']}].speedup.geomean is " \
           f"1.25 but the raw records give {json.dumps(old)}" in r.stdout
