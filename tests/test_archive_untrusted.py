"""`crossbench archive verify` on someone else's zip: a decompression bomb, a symbolic link, a
`../` or absolute name, or a name given twice is refused with one line naming the entry,
before anything of the zip is written; the limits fit the project's real archives."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import struct
import tempfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study

from crossbench.archive.build import parse_size
from crossbench.archive.verify import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_MEMBER_BYTES,
    MAX_NAME_BYTES,
    Limits,
    zip_entries,
)
from crossbench.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(6)]
FIX = "(fix: only verify archives made by `crossbench archive`)"


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def real_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A genuine archive of a small synthetic study."""
    tmp = tmp_path_factory.mktemp("untrusted")
    run = tmp / "study"
    study(run, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2)],
          lambda arm, pid, trial, occ: 100.0 + (arm.n or 0) * 5 + int(pid[1:]), trials=2)
    assert invoke("analyze", str(run), "--resamples", "200").exit_code == 0
    r = invoke("archive", str(run), "--out", str(tmp / "out"), "--creator", "Doe, Jane",
               "--name", "small")
    assert r.exit_code == 0, r.output
    return tmp / "out" / "small.zip"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder verify unpacks into: empty after every refusal."""
    where = tmp_path / "scratch"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def written(scratch: Path) -> list[str]:
    return [str(p.relative_to(scratch)) for p in scratch.rglob("*")]


def copy_with(src: Path, dest: Path, *extra: tuple[zipfile.ZipInfo | str, bytes]) -> Path:
    """``src`` re-zipped with ``extra`` entries appended."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        for name, data in extra:
            zout.writestr(name, data)
    return dest


def test_a_genuine_archive_still_verifies(real_zip: Path, scratch: Path) -> None:
    r = invoke("archive", "verify", str(real_zip))
    assert r.exit_code == 0, r.output
    assert written(scratch) == []  # the unpacked copy is removed afterwards


def test_the_limits_fit_the_projects_real_archives() -> None:
    """Every archive under examples/ (the H200 and H100 studies: up to 301 entries and 14.9 MB,
    paths 6 deep and 129 bytes long (SGLang's second part, 2026-12-06), no member over 1.2 MB;
    the largest, 2026-12-06's 38-cell llama.cpp round) passes the pre-checks with a margin of
    300x on entries, 500x on bytes and 800x on a member, 5x on depth and 7x on name length,
    and the CLI's defaults are the documented constants."""
    zips = sorted((ROOT / "examples").rglob("*.zip"))
    assert len(zips) >= 5
    for z in zips:
        with zipfile.ZipFile(z) as zf:
            infos = zip_entries(zf, z.name, Limits())
            assert len(infos) * 300 < MAX_ENTRIES, z
            assert sum(i.file_size for i in infos) * 500 < MAX_BYTES, z
            assert max(i.file_size for i in infos) * 800 < MAX_MEMBER_BYTES, z
            assert max(i.filename.count("/") + 1 for i in infos) * 5 < MAX_DEPTH, z
            assert max(len(i.filename.encode()) for i in infos) * 7 < MAX_NAME_BYTES, z
    verify_cmd = cli.commands["archive"].commands["verify"]  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in verify_cmd.params}
    assert parse_size(defaults["max_size"]) == MAX_BYTES
    assert defaults["max_entries"] == MAX_ENTRIES


def test_a_zip_bomb_is_refused_before_anything_is_written(tmp_path: Path, scratch: Path) -> None:
    """300 MB of zeros in a zip of a few hundred kB: refused over a 100 MB limit."""
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf, \
            zf.open("bomb/zeros.bin", "w", force_zip64=True) as fh:
        block = bytes(1 << 20)
        for _ in range(300):
            fh.write(block)
    assert bomb.stat().st_size < 1_000_000
    r = invoke("archive", "verify", str(bomb), "--max-size", "100MB")
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {bomb} declares 314572800 bytes uncompressed, more "
                        "than the limit of 100000000 (a decompression bomb?) (fix: only verify "
                        "archives made by `crossbench archive`, or raise --max-size if it is "
                        "one)\n")
    assert written(scratch) == []


def test_a_header_declaring_a_huge_size_is_refused_at_the_default_limit(
        tmp_path: Path, scratch: Path) -> None:
    """Nine entries whose central directory declares 1 GiB each (the most one member may
    declare; 9 GiB in all): the zip is tiny, the default limit (8 GiB) refuses it without
    reading a byte of data."""
    liar = tmp_path / "liar.zip"
    with zipfile.ZipFile(liar, "w", zipfile.ZIP_STORED) as zf:
        for i in range(9):
            zf.writestr(f"liar/f{i}.bin", b"x")
    data = bytearray(liar.read_bytes())
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) >= 0:  # central directory headers
        struct.pack_into("<I", data, pos + 24, MAX_MEMBER_BYTES)  # uncompressed size
        pos += 4
    liar.write_bytes(bytes(data))
    with zipfile.ZipFile(liar) as zf:
        assert sum(i.file_size for i in zf.infolist()) == 9 * MAX_MEMBER_BYTES
    r = invoke("archive", "verify", str(liar))
    assert r.exit_code == 2
    assert f"{liar} declares {9 * MAX_MEMBER_BYTES} bytes uncompressed, more than the limit " \
        f"of {MAX_BYTES} (a decompression bomb?)" in r.stderr
    assert written(scratch) == []


def test_too_many_entries(tmp_path: Path, scratch: Path) -> None:
    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as zf:
        for i in range(51):
            zf.writestr(f"many/{i}.txt", b"")
    r = invoke("archive", "verify", str(many), "--max-entries", "50")
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {many} holds 51 entries, more than the limit of 50 "
                        "(fix: only verify archives made by `crossbench archive`, or raise "
                        "--max-entries if it is one)\n")
    assert written(scratch) == []


def symlink(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


@pytest.mark.parametrize(("entry", "message"), [
    (symlink("small/data/passwd", "/etc/passwd"),
     "entry 'small/data/passwd' is a symbolic link, not a regular file"),
    (symlink("small/up", ".."), "entry 'small/up' is a symbolic link, not a regular file"),
    (("small/../evil.txt", b"x"), "holds an unsafe path 'small/../evil.txt'"),
    (("/etc/evil.txt", b"x"), "holds an unsafe path '/etc/evil.txt'"),
    (("small/README.md", b"a second README\n"), "holds 'small/README.md' twice (which copy "
     "counts depends on the tool that unpacks it)"),
])
def test_unsafe_entries_are_refused_naming_the_entry(
        real_zip: Path, tmp_path: Path, scratch: Path,
        entry: tuple[zipfile.ZipInfo | str, bytes], message: str) -> None:
    bad = tmp_path / "bad.zip"
    with pytest.warns(UserWarning, match="Duplicate name") if "twice" in message else \
            contextlib.nullcontext():
        copy_with(real_zip, bad, entry)
    r = invoke("archive", "verify", str(bad))
    assert r.exit_code == 2
    assert r.stderr == f"crossbench: error: {bad} {message} {FIX}\n"
    assert written(scratch) == []
    assert not (tmp_path / "evil.txt").exists()


def test_a_duplicate_with_the_same_bytes_verified_before(real_zip: Path, tmp_path: Path) -> None:
    """The case that verified as ok: the same file twice, same bytes (checksums agree)."""
    with zipfile.ZipFile(real_zip) as zf:
        readme = zf.read("small/README.md")
    bad = tmp_path / "twice.zip"
    with pytest.warns(UserWarning, match="Duplicate name"):
        copy_with(real_zip, bad, ("small/README.md", readme))
    r = invoke("archive", "verify", str(bad), "--no-reanalysis")
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {bad} holds 'small/README.md' twice (which copy "
                        f"counts depends on the tool that unpacks it) {FIX}\n")


def test_side_archives_follow_the_same_rules(real_zip: Path, tmp_path: Path) -> None:
    """A side archive is read, never unpacked; a link or a bomb in it is a problem of its
    check (exit 1), the main archive being fine."""
    out = tmp_path / "out"
    shutil.copytree(real_zip.parent, out)
    folder = out / "small"
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    manifest["side_archives"] = [{"name": "small-logs.zip", "sha256": "0" * 64, "files": []}]
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    with zipfile.ZipFile(out / "small-logs.zip", "w") as zf:
        info, target = symlink("small/data/server.log", "/etc/shadow")
        zf.writestr(info, target)
    r = invoke("archive", "verify", str(folder), "--no-reanalysis")
    assert r.exit_code == 1
    assert "small-logs.zip: entry 'small/data/server.log' is a symbolic link, not a regular " \
        "file" in r.stdout.splitlines()


def test_a_folder_with_a_symbolic_link_is_not_followed(real_zip: Path, tmp_path: Path) -> None:
    folder = tmp_path / "small"
    with zipfile.ZipFile(real_zip) as zf:
        zf.extractall(tmp_path)
    secret = tmp_path / "outside.txt"
    secret.write_text("hf_" + "A" * 34 + "\n")  # would be a finding if it were read
    os.symlink(secret, folder / "data" / "notes.txt")
    r = invoke("archive", "verify", str(folder), "--no-reanalysis")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert "data/notes.txt: is a symbolic link (an archive holds plain files only); not " \
        "followed" in lines
    assert not any("Hugging Face" in ln for ln in lines)
