"""Careless and hostile input, round two, items 7 and 8 of issue 37: an untrusted archive
(`archive verify`, `crossbench.open_run`) whose path is 2 000 folders deep, names one file in
two spellings, declares less than it holds, is encrypted, uses an unknown compression method,
holds a corrupt deflate stream or an over-long name, or declares a member over the one-file
cap; and a start-spread file with df Infinity or 1e400, sigma_log 1e300, ``sources: "x"``.
Every case is the exact input; every refusal is one line (exit code 2 on the command line,
a UserError from Python) and no temporary folder is left behind."""

from __future__ import annotations

import json
import random
import struct
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from standins.study import Arm, study

import crossbench
from crossbench.analysis.start_spread import Spread, StartSpread
from crossbench.archive.verify import MAX_MEMBER_BYTES
from crossbench.cli.main import cli
from crossbench.errors import UserError

PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(6)]
FIX = "(fix: only verify archives made by `crossbench archive`)"


def refused(r: Result) -> str:
    """The one stderr line of a refusal (exit code 2, no traceback)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- 7. archives --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A genuine archive of a small synthetic study (top folder ``small/``)."""
    tmp = tmp_path_factory.mktemp("hostile3")
    run = tmp / "study"
    study(run, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2)],
          lambda arm, pid, trial, occ: 100.0 + (arm.n or 0) * 5 + int(pid[1:]), trials=2)
    assert CliRunner().invoke(cli, ["analyze", str(run), "--resamples", "200"]).exit_code == 0
    r = CliRunner().invoke(cli, ["archive", str(run), "--out", str(tmp / "out"), "--creator",
                                 "Doe, Jane", "--name", "small"])
    assert r.exit_code == 0, r.output
    return tmp / "out" / "small.zip"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder verify and open_run unpack into: empty after every refusal."""
    where = tmp_path / "scratch"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def with_entry(src: Path, dest: Path, *extra: tuple[str, bytes],
               method: int = zipfile.ZIP_DEFLATED) -> Path:
    """``src`` re-zipped with ``extra`` entries appended."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        for name, data in extra:
            zout.writestr(name, data, compress_type=method)
    return dest


def patch(path: Path, name: str, local: tuple[int, str, int] | None,
          central: tuple[int, str, int] | None) -> None:
    """Overwrite one field (offset, struct format, value) of entry ``name``'s local header
    and of its central directory header."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        offset = zf.getinfo(name).header_offset
    if local:
        struct.pack_into(local[1], data, offset + local[0], local[2])
    pos = 0
    while central and (pos := data.find(b"PK\x01\x02", pos)) >= 0:
        if data[pos + 46:pos + 46 + len(name)] == name.encode():
            struct.pack_into(central[1], data, pos + central[0], central[2])
        pos += 4
    path.write_bytes(bytes(data))


def _deep(real: Path, tmp: Path) -> Path:
    return with_entry(real, tmp / "deep.zip", ("small/" + "a/" * 2000 + "f.txt", b"x"))


def _slashes(real: Path, tmp: Path) -> Path:
    return with_entry(real, tmp / "dup.zip", ("small//README.md", b"other"))


def _dot(real: Path, tmp: Path) -> Path:
    return with_entry(real, tmp / "dup.zip", ("small/./README.md", b"other"))


def _declared_small(real: Path, tmp: Path) -> Path:
    """1 000 bytes whose headers declare 10 (uncompressed size: local +22, central +24)."""
    z = with_entry(real, tmp / "small.zip", ("small/data/extra.txt", b"x" * 1000))
    patch(z, "small/data/extra.txt", (22, "<I", 10), (24, "<I", 10))
    return z


def _encrypted(real: Path, tmp: Path) -> Path:
    """The general-purpose flag's bit 0 (local +6, central +8)."""
    z = with_entry(real, tmp / "enc.zip", ("small/data/extra.txt", b"x" * 100))
    patch(z, "small/data/extra.txt", (6, "<H", 1), (8, "<H", 1))
    return z


def _method(real: Path, tmp: Path) -> Path:
    """Compression method 77 (local +8, central +10)."""
    z = with_entry(real, tmp / "method.zip", ("small/data/extra.txt", b"x" * 100))
    patch(z, "small/data/extra.txt", (8, "<H", 77), (10, "<H", 77))
    return z


def _corrupt(real: Path, tmp: Path) -> Path:
    """A deflate stream (of text, so Huffman-coded) with 200 of its bytes flipped."""
    text = "".join(f"row {i} of {random.Random(i).random()}\n" for i in range(2000))
    z = with_entry(real, tmp / "corrupt.zip", ("small/data/extra.txt", text.encode()))
    data = bytearray(z.read_bytes())
    with zipfile.ZipFile(z) as zf:
        offset = zf.getinfo("small/data/extra.txt").header_offset
    start = offset + 30 + len("small/data/extra.txt")
    for i in range(start + 10, start + 210):
        data[i] ^= 0x5A
    z.write_bytes(bytes(data))
    return z


def _long_part(real: Path, tmp: Path) -> Path:
    return with_entry(real, tmp / "long.zip", ("small/" + "n" * 300 + ".txt", b"x"))


def _long_path(real: Path, tmp: Path) -> Path:
    return with_entry(real, tmp / "long.zip", ("small/" + ("d" * 200 + "/") * 20 + "f", b"x"))


def _huge_member(real: Path, tmp: Path) -> Path:
    """One entry whose central directory declares 2 GiB (the total stays under 8 GiB)."""
    z = with_entry(real, tmp / "huge.zip", ("small/data/extra.txt", b"x"),
                   method=zipfile.ZIP_STORED)
    patch(z, "small/data/extra.txt", None, (24, "<I", 2 * 1024**3))
    return z


LONG = "'small/nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn'...'nnnnnnnnnnnnnnnnnnnnnnnnnn.txt'"
CASES: list[tuple[Callable[[Path, Path], Path], str]] = [
    (_deep, "holds a path 2002 parts deep ('small/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/'...'/a/a/a/"
     "a/a/a/a/a/a/a/a/a/f.txt'), deeper than 32"),
    (_slashes, "holds 'small//README.md' (as 'small/README.md') twice (which copy counts "
     "depends on the tool that unpacks it)"),
    (_dot, "holds 'small/./README.md' (as 'small/README.md') twice (which copy counts depends "
     "on the tool that unpacks it)"),
    (_declared_small, "entry 'small/data/extra.txt' holds more than its declared 10 bytes"),
    (_encrypted, "entry 'small/data/extra.txt' is encrypted (an archive holds plain files)"),
    (_method, "entry 'small/data/extra.txt' uses compression method 77, not one of stored, "
     "deflate, bzip2, lzma"),
    (_corrupt, "entry 'small/data/extra.txt' is damaged (Error -3 while decompressing data: "),
    (_long_part, f"holds a name too long to unpack ({LONG}: 310 bytes, a part of 304; at most "
     "1024 and 255)"),
    (_long_path, "holds a name too long to unpack ('small/dddddddddddddddddddddddddddddddddd'"
     "...'dddddddddddddddddddddddddddd/f': 4027 bytes, a part of 200; at most 1024 and 255)"),
    (_huge_member, f"entry 'small/data/extra.txt' declares {2 * 1024**3} bytes, more than the "
     f"limit of {MAX_MEMBER_BYTES} for one file"),
]
IDS = [make.__name__.strip("_") for make, _ in CASES]


@pytest.mark.parametrize(("make", "problem"), CASES, ids=IDS)
def test_a_hostile_archive_is_one_line_and_leaves_no_temporary_folder(
        real_zip: Path, tmp_path: Path, scratch: Path,
        make: Callable[[Path, Path], Path], problem: str) -> None:
    bad = make(real_zip, tmp_path)
    line = refused(CliRunner().invoke(cli, ["archive", "verify", str(bad)]))
    assert line.startswith(f"crossbench: error: {bad} {problem}"), line
    assert line.endswith(FIX if make is not _huge_member
                         else FIX.removesuffix(")") + " (no run file is that large))")
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("make", "problem"), CASES, ids=IDS)
def test_open_run_refuses_the_same_archives_and_removes_its_folder(
        real_zip: Path, tmp_path: Path, scratch: Path,
        make: Callable[[Path, Path], Path], problem: str) -> None:
    bad = make(real_zip, tmp_path)
    with pytest.raises(UserError) as e:
        crossbench.open_run(bad)
    assert e.value.message.startswith(f"{bad} {problem}")
    assert list(scratch.iterdir()) == []


def test_a_genuine_archive_still_opens_and_verifies(real_zip: Path, scratch: Path) -> None:
    r = CliRunner().invoke(cli, ["archive", "verify", str(real_zip), "--no-reanalysis"])
    assert r.exit_code == 0, r.output
    with crossbench.open_run(real_zip) as run:
        assert len(run.requests) > 0
    assert list(scratch.iterdir()) == []


# -- 8. start-spread files: strict types and ranges ----------------------------------------------

def _spread_text(tmp_path: Path, edit: Callable[[dict[str, Any]], None],
                 raw: tuple[str, str] | None = None) -> Path:
    """A valid two-spread file edited by ``edit``; ``raw`` replaces one text in the JSON (for
    numbers JSON writers never write: Infinity, 1e400)."""
    doc = StartSpread((Spread("llama-server", "baseline", 0.02, 4, 2, 6),
                       Spread("llama-server", "draft-simple", 0.05, 4, 2, 6)),
                      ({"dir": "calibration", "gpu": None},)).to_record()
    edit(doc)
    text = json.dumps(doc)
    if raw:
        assert raw[0] in text
        text = text.replace(raw[0], raw[1], 1)  # the first spread's
    path = tmp_path / "spread.json"
    path.write_text(text)
    return path


def _none(doc: dict[str, Any]) -> None:
    pass


@pytest.mark.parametrize(("edit", "raw", "problem"), [
    (_none, ('"df": 4', '"df": Infinity'),
     "spreads[0] lacks or mistypes df: inf (a whole number up to 1000000000)"),
    (_none, ('"df": 4', '"df": 1e400'),
     "spreads[0] lacks or mistypes df: inf (a whole number up to 1000000000)"),
    (lambda d: d["spreads"][1].update(df=2.9), None,
     "spreads[1] lacks or mistypes df: 2.9 (a whole number up to 1000000000)"),
    (lambda d: d["spreads"][1].update(starts=1e300), None,
     "spreads[1] lacks or mistypes starts: 1e+300 (a whole number up to 1000000000)"),
    (lambda d: d["spreads"][1].update(sigma_log=1e300), None,
     "spreads[1] has sigma_log 1e+300 (llama-server draft-simple), outside [0.005, 2.0]"),
    (lambda d: d["spreads"][1].update(sigma_log="0.05"), None,
     "spreads[1] lacks or mistypes sigma_log: '0.05' (a finite number)"),
    (lambda d: d["spreads"][1].update(sigma_log=True), None,
     "spreads[1] lacks or mistypes sigma_log: True (a finite number)"),
    (lambda d: d["spreads"][1].update(sigma_log=None), None,
     "spreads[1] lacks or mistypes sigma_log: None (a finite number)"),
    (lambda d: d.update(sources="x"), None, "spreads and sources must be lists of objects"),
    (lambda d: d.update(sources=""), None, "spreads and sources must be lists of objects"),
    (lambda d: d.update(spreads=0), None, "spreads and sources must be lists of objects"),
    (lambda d: d["spreads"].append(dict(d["spreads"][0])), None,
     "spreads[2] repeats llama-server baseline"),
])
def test_a_spread_file_with_a_wrong_type_or_range_is_one_line(
        tmp_path: Path, edit: Callable[[dict[str, Any]], None], raw: tuple[str, str] | None,
        problem: str) -> None:
    path = _spread_text(tmp_path, edit, raw)
    run = tmp_path / "s"
    study(run, PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2)],
          lambda arm, pid, trial, occ: 50.0 if arm.method == "none" else 60.0, trials=2)
    line = refused(CliRunner().invoke(cli, ["analyze", str(run), "--start-spread", str(path)]))
    assert line.startswith(f"crossbench: error: --start-spread {path}: {problem}"), line
    assert not (run / "analysis.json").exists()


def test_a_damaged_side_archive_is_a_problem_of_its_check(real_zip: Path, tmp_path: Path) -> None:
    """A side archive is streamed, never unpacked: a corrupt member is a problem line of the
    side-archive check (exit 1), not a traceback."""
    with zipfile.ZipFile(real_zip) as zf:
        zf.extractall(tmp_path)
    folder = tmp_path / "small"
    side = _corrupt(real_zip, tmp_path)
    (tmp_path / "small-logs.zip").write_bytes(side.read_bytes())
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    manifest["side_archives"] = [{"name": "small-logs.zip", "sha256": "0" * 64,
                                  "files": [{"path": "data/extra.txt", "sha256": "0" * 64}]}]
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    r = CliRunner().invoke(cli, ["archive", "verify", str(folder), "--no-reanalysis"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert any(ln.startswith("small-logs.zip:data/extra.txt: damaged data (Error -3 while "
                             "decompressing data: ") for ln in r.stdout.splitlines()), r.stdout
