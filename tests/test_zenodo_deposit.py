"""`crossbench archive upload` against the local Zenodo stand-in (the real service is not
reachable from here): the deposit flow, retries, a failure in the middle and its resumption,
new versions, and that the token never shows up anywhere."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study
from standins.zenodo import ZenodoStandIn

from crossbench.archive.zenodo import Retry, ZenodoClient, archive_files, deposit
from crossbench.cli.main import cli
from crossbench.errors import RunError, UserError

PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(6)]
ACC = {"drafts": 600, "draft_tokens": 1200, "accepted": 800, "per_position": [500, 300]}
TOKEN = "Zt0k3nXq" + "a1B2c3D4e5" * 5  # looks like a Zenodo personal access token
FAST = ("--retries", "2", "--backoff-s", "0.01")


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 130.0 + int(pid[1:])


def invoke(*args: str, token: str | None = TOKEN):  # type: ignore[no-untyped-def]
    env = {"ZENODO_TOKEN": token} if token is not None else {"ZENODO_TOKEN": ""}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v1 (zip + side zip of logs) and v2 of one synthetic study; tests copy them."""
    tmp = tmp_path_factory.mktemp("zenodo")
    run = tmp / "study"
    study(run, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=2)
    for c in json.loads((run / "state.json").read_text())["cells"]:
        (run / c["dir"] / "server.log").write_text("server output\n" * 500)
    assert invoke("analyze", str(run), "--resamples", "200").exit_code == 0
    for version, out in (("1", "v1"), ("2", "v2")):
        r = invoke("archive", str(run), "--out", str(tmp / out), "--creator", "Doe, Jane;Lab",
                   "--version", version, "--name", f"study-v{version}",
                   "--split-logs-over", "1kB")
        assert r.exit_code == 0, r.output
    return tmp


@pytest.fixture
def v1(archives: Path, tmp_path: Path) -> Path:
    shutil.copytree(archives / "v1", tmp_path / "v1")
    return tmp_path / "v1" / "study-v1.zip"


@pytest.fixture
def v2(archives: Path, tmp_path: Path) -> Path:
    shutil.copytree(archives / "v2", tmp_path / "v2")
    return tmp_path / "v2" / "study-v2.zip"


@pytest.fixture
def standin():  # type: ignore[no-untyped-def]
    with ZenodoStandIn(TOKEN) as s:
        yield s


def puts(standin: ZenodoStandIn, name: str) -> list[int]:
    return [r.status for r in standin.log if r.method == "PUT" and r.path.endswith("/" + name)]


def test_draft_then_metadata_without_publishing(standin: ZenodoStandIn, v1: Path) -> None:
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url)
    assert r.exit_code == 0, r.output
    (dep,) = standin.depositions.values()
    assert r.stdout == f"draft {dep.id}: {standin.base_url.removesuffix('/api')}/deposit/" \
                       f"{dep.id}\n"
    assert dep.state == "unsubmitted"
    side = v1.with_name("study-v1-logs.zip")
    assert {k: f.md5 for k, f in dep.files.items()} == {v1.name: md5(v1),
                                                         side.name: md5(side)}
    assert dep.files[v1.name].data == v1.read_bytes()
    with zipfile.ZipFile(v1) as zf:
        meta = json.loads(zf.read("study-v1/.zenodo.json"))
    assert {k: v for k, v in dep.metadata.items() if k != "prereserve_doi"} == meta
    assert [(x.method, x.path.split("/api/")[1].split("/")[0], x.status) for x in standin.log] \
        == [("POST", "deposit", 201), ("GET", "deposit", 200), ("PUT", "files", 201),
            ("PUT", "files", 201), ("GET", "deposit", 200), ("PUT", "deposit", 200)]
    assert "not published" in r.stderr


def test_publish(standin: ZenodoStandIn, v1: Path) -> None:
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, "--publish")
    assert r.exit_code == 0, r.output
    (dep,) = standin.depositions.values()
    assert dep.state == "done"
    host = standin.base_url.removesuffix("/api")
    assert r.stdout == f"published: doi 10.5072/zenodo.{dep.id} ({host}/records/{dep.id})\n"
    again = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, "--publish")
    assert again.exit_code == 0 and again.stdout == r.stdout  # nothing sent twice
    assert "is already published" in again.stderr
    assert len(standin.depositions) == 1


def test_failure_in_the_middle_then_resume(standin: ZenodoStandIn, v1: Path) -> None:
    side = v1.with_name("study-v1-logs.zip")
    standin.fail_upload(2, status=503, times=100)  # every attempt at the second file fails
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, *FAST)
    assert r.exit_code == 1
    assert f"PUT /api/files/{next(iter(standin.depositions.values())).bucket}/" \
           f"{side.name} failed 3 times, last: HTTP 503" in r.stderr
    assert "it resumes where it stopped" in r.stderr
    (dep,) = standin.depositions.values()
    assert list(dep.files) == [v1.name] and dep.state == "unsubmitted"
    state = json.loads(v1.with_name("study-v1.deposit.json").read_text())
    assert state == {"base_url": standin.base_url, "deposition_id": dep.id,
                     "new_version_of": None, "files": {v1.name: md5(v1)}}
    standin.clear_failures()
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, "--publish", *FAST)
    assert r.exit_code == 0, r.output
    assert len(standin.depositions) == 1  # the same draft, resumed
    assert puts(standin, v1.name) == [201]  # the first file was not sent again
    assert puts(standin, side.name) == [503, 503, 503, 201]
    assert f"{v1.name}: already on the deposition (md5 {md5(v1)}), skipped" in r.stderr
    assert {k: f.md5 for k, f in dep.files.items()} == {v1.name: md5(v1), side.name: md5(side)}
    assert dep.state == "done"


@pytest.mark.parametrize("text", ["[1, 2]", "{broken", '{"deposition_id": "x"}'])
def test_a_damaged_upload_state_is_an_error_naming_it(standin: ZenodoStandIn, v1: Path,
                                                      text: str) -> None:
    state = v1.with_name("study-v1.deposit.json")
    state.write_text(text)
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, *FAST)
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert f"{state}: not an upload state" in r.stderr and "delete it" in r.stderr
    assert not standin.depositions  # nothing was created on the service


def test_dropped_connection_429_and_corruption_are_retried(standin: ZenodoStandIn,
                                                          v1: Path) -> None:
    waits: list[float] = []
    client = ZenodoClient(standin.base_url, TOKEN, retry=Retry(attempts=4, base_s=0.5),
                          sleep=waits.append)
    standin.fail_upload(1, drop=True)
    standin.fail_upload(2, status=429, retry_after=7)
    standin.fail_upload(3, corrupt=True)
    result = deposit(archive_files(v1), client)
    assert waits == [0.5, 7.0, 2.0]  # doubling, Retry-After honoured when longer
    (dep,) = standin.depositions.values()
    assert dep.files[v1.name].data == v1.read_bytes()
    assert [s for s in puts(standin, v1.name)] == [-1, 429, 201, 201]
    assert result.uploaded == [v1.name, "study-v1-logs.zip"]
    standin.rate_limit(1, retry_after=2)
    assert client.get(dep.id)["id"] == dep.id
    assert waits[-1] == 2.0


def test_new_version(standin: ZenodoStandIn, v1: Path, v2: Path) -> None:
    assert invoke("archive", "upload", str(v1), "--base-url", standin.base_url,
                  "--publish").exit_code == 0
    (first,) = standin.depositions.values()
    r = invoke("archive", "upload", str(v2), "--base-url", standin.base_url, "--publish",
               "--new-version-of", str(first.id))
    assert r.exit_code == 0, r.output
    second = standin.depositions[max(standin.depositions)]
    assert second.id != first.id and second.concept == first.concept
    assert sorted(second.files) == ["study-v2-logs.zip", "study-v2.zip"]
    assert sorted(first.files) == ["study-v1-logs.zip", "study-v1.zip"]  # untouched
    assert second.metadata["version"] == "2" and second.state == "done"
    assert "removed study-v1.zip (previous version)" in r.stderr
    assert f"published: doi 10.5072/zenodo.{second.id}" in r.stdout


def test_token_never_leaks(standin: ZenodoStandIn, v1: Path, tmp_path: Path) -> None:
    outputs = []
    standin.fail_upload(1, status=500, times=100)
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, *FAST)
    assert r.exit_code == 1
    outputs.append(r.output + r.stderr)
    standin.clear_failures()
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, "--publish")
    assert r.exit_code == 0
    outputs.append(r.output + r.stderr)
    wrong = "W" * 40
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, token=wrong)
    assert r.exit_code == 2
    assert r.stderr.startswith("crossbench: error: GET /api/deposit/depositions/")
    assert "HTTP 401" in r.stderr and wrong not in r.stderr
    outputs.append(r.output + r.stderr)
    client = ZenodoClient(standin.base_url, TOKEN, retry=Retry(attempts=1))
    with pytest.raises(RunError) as exc:
        client.request("POST", "deposit/depositions/999/actions/publish")
    outputs.append(str(exc.value) + repr(exc.value))
    for text in outputs:
        assert TOKEN not in text
    assert all(TOKEN not in x.path and "access_token" not in x.path for x in standin.log)
    for path in v1.parent.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
            if path.suffix == ".zip":
                with zipfile.ZipFile(path) as zf:
                    assert all(TOKEN.encode() not in zf.read(n) for n in zf.namelist())


def test_token_goes_only_to_the_configured_https_host(standin: ZenodoStandIn) -> None:
    with pytest.raises(UserError, match="plain HTTP: the token would travel unencrypted"):
        ZenodoClient("http://zenodo.example.org/api", TOKEN)
    client = ZenodoClient(standin.base_url, TOKEN)
    with pytest.raises(RunError, match="the server pointed to https://elsewhere.example"):
        client.request("PUT", "https://elsewhere.example/api/files/b/x.zip")
    assert standin.log == []


def test_refuses_without_token_or_with_a_broken_archive(standin: ZenodoStandIn,
                                                        v1: Path) -> None:
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url, token=None)
    assert r.exit_code == 2
    assert r.stderr.startswith("crossbench: error: ZENODO_TOKEN is not set")
    with zipfile.ZipFile(v1) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(v1, "w") as zf:
        for info, data in items:
            zf.writestr(info, data + (b"\n" if info.filename.endswith("README.md") else b""))
    r = invoke("archive", "upload", str(v1), "--base-url", standin.base_url)
    assert r.exit_code == 1
    assert "README.md: sha256 differs from SHA256SUMS" in r.stderr
    assert "does not verify" in r.stderr and "nothing was uploaded" in r.stderr
    assert standin.log == []


def test_standin_follows_zenodo_rules(standin: ZenodoStandIn) -> None:
    client = ZenodoClient(standin.base_url, TOKEN, retry=Retry(attempts=1))
    dep = client.create()
    assert dep["state"] == "unsubmitted" and dep["metadata"]["prereserve_doi"]["doi"] == \
        f"10.5072/zenodo.{dep['id']}"
    with pytest.raises(RunError, match=r"Minimum one file must be provided"):
        client.publish(dep["id"])
    with pytest.raises(RunError, match=r"metadata.upload_type: Not a valid choice"):
        client.set_metadata(dep["id"], {"upload_type": "thesis"})
    with pytest.raises(RunError, match=r"Only a published deposition can have a new version"):
        client.new_version(dep["id"])
