"""``crossbench archive upload``: deposit an archive on Zenodo through its REST API.

The flow (docs/report.md "Upload to Zenodo"): create a draft (or a new version), ``PUT``
each zip to the draft's bucket as a stream and check the md5 Zenodo returns, set the metadata
of ``.zenodo.json``, and publish only when asked. A partial upload resumes from the state kept
beside the zip (:data:`STATE_SUFFIX`); 429, 5xx and lost connections are retried with
backoff (:class:`Retry`). The token comes from ``ZENODO_TOKEN``, goes only in the
``Authorization`` header to the configured host, and never into a message, a log line, an
exception or a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crossbench.archive.build import MANIFEST
from crossbench.errors import RunError, UserError
from crossbench.store.atomic import file_digest, write_json_atomic

ZENODO_API = "https://zenodo.org/api"
SANDBOX_API = "https://sandbox.zenodo.org/api"
TOKEN_VARIABLE = "ZENODO_TOKEN"
STATE_SUFFIX = ".deposit.json"
"""The resume state beside the zip: ``<name>.deposit.json``."""

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Retry:
    """Attempts per request and the backoff between them (doubling, capped)."""

    attempts: int = 6
    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        wait = min(self.cap_s, self.base_s * 2.0 ** (attempt - 1))
        if retry_after:
            with contextlib.suppress(ValueError):
                wait = max(wait, min(float(retry_after), self.cap_s))
        return wait


class _Transient(Exception):
    """A failure worth retrying: 429, 5xx, a lost connection, a checksum that differs."""

    def __init__(self, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _HashingReader:
    """A file object that hashes what is read from it (md5, as Zenodo reports)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.md5 = hashlib.md5()

    def read(self, size: int = -1) -> bytes:
        """Read and hash up to ``size`` bytes."""
        block = self._fh.read(size)
        self.md5.update(block)
        return block


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ZenodoClient:
    """The deposit API, one method per endpoint; every request retried as :class:`Retry`
    says. ``base_url`` is the API root (``https://zenodo.org/api``)."""

    def __init__(self, base_url: str, token: str, retry: Retry | None = None,
                 sleep: Callable[[float], None] = time.sleep, log: Log = _quiet,
                 timeout_s: float = 600.0) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("https", "http") or not url.hostname:
            raise UserError(f"{base_url!r} is not an API root URL",
                            "give e.g. https://zenodo.org/api")
        if url.scheme == "http" and not _loopback(url.hostname):
            raise UserError(f"{base_url} is plain HTTP: the token would travel unencrypted",
                            "use https (plain http is only for a stand-in on this machine)")
        if not token:
            raise UserError(f"{TOKEN_VARIABLE} is empty", "export the Zenodo token")
        self.base_url = base_url.rstrip("/")
        self._origin = (url.scheme, url.netloc)
        self._token = token
        self.retry = retry or Retry()
        self._sleep, self._log, self._timeout = sleep, log, timeout_s
        handlers: list[urllib.request.BaseHandler] = []
        if _loopback(url.hostname):  # a local stand-in: never through a proxy
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    # -- plumbing ------------------------------------------------------------------------

    def _url(self, path_or_url: str) -> str:
        url = path_or_url if "://" in path_or_url else f"{self.base_url}/{path_or_url}"
        parts = urllib.parse.urlsplit(url)
        if (parts.scheme, parts.netloc) != self._origin:
            raise RunError(f"the server pointed to {parts.scheme}://{parts.netloc}, not "
                           f"{self._origin[1]}", "the token is only sent to the configured "
                           "API host; check --base-url")
        return url

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "<redacted>")

    def _once(self, method: str, url: str, body: bytes | _HashingReader | None,
              headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(url, data=body, method=method, headers={
            **headers, "Authorization": f"Bearer {self._token}", "Accept": "application/json"})
        try:
            with self._opener.open(req, timeout=self._timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, dict(e.headers or {}), e.read()
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise _Transient(f"connection failed ({type(reason).__name__}: "
                             f"{self._scrub(str(reason))})") from None

    def request(self, method: str, path_or_url: str, *, payload: Any = None,
                upload: Path | None = None, expect: tuple[int, ...] = (200, 201, 202, 204),
                check_md5: bool = False) -> Any:
        """Send a request (JSON ``payload`` or a file streamed from ``upload``), retrying
        transient failures; returns the decoded JSON answer (None when empty)."""
        url = self._url(path_or_url)
        shown = f"{method} {urllib.parse.urlsplit(url).path}"
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return self._attempt(method, url, shown, payload, upload, expect, check_md5)
            except _Transient as e:
                if attempt == self.retry.attempts:
                    raise RunError(f"{shown} failed {attempt} times, last: {e}",
                                   "Zenodo may be down or rate-limiting: run the same "
                                   "command again later, it resumes where it stopped") from None
                wait = self.retry.delay(attempt, e.retry_after)
                self._log(f"{shown}: {e}; retry {attempt}/{self.retry.attempts - 1} in "
                          f"{wait:.1f} s")
                self._sleep(wait)
        raise AssertionError("unreachable")

    def _attempt(self, method: str, url: str, shown: str, payload: Any, upload: Path | None,
                 expect: tuple[int, ...], check_md5: bool) -> Any:
        headers: dict[str, str] = {}
        reader: _HashingReader | None = None
        if upload is not None:
            with upload.open("rb") as fh:
                reader = _HashingReader(fh)
                headers = {"Content-Type": "application/octet-stream",
                           "Content-Length": str(upload.stat().st_size)}
                status, resp_headers, raw = self._once(method, url, reader, headers)
        else:
            body = None if payload is None else json.dumps(payload).encode()
            if body is not None:
                headers = {"Content-Type": "application/json"}
            status, resp_headers, raw = self._once(method, url, body, headers)
        if status == 429 or status >= 500:
            raise _Transient(f"HTTP {status}{_message(raw, self._scrub)}",
                             resp_headers.get("Retry-After"))
        if status not in expect:
            err = UserError if status in (401, 403) else RunError
            hint = ("check that ZENODO_TOKEN is valid for this server (the sandbox has its "
                    "own tokens) with the deposit:write and deposit:actions scopes"
                    if status in (401, 403) else "see the message; the draft is kept, so "
                    "the same command resumes once it is fixed")
            raise err(f"{shown}: HTTP {status}{_message(raw, self._scrub)}", hint)
        answer = json.loads(raw) if raw.strip() else None
        if check_md5 and reader is not None:
            sent = reader.md5.hexdigest()
            got = str((answer or {}).get("checksum", "")).removeprefix("md5:")
            if got != sent:
                raise _Transient(f"Zenodo's md5 {got or 'none'} differs from the md5 sent "
                                 f"({sent})")
        return answer

    # -- endpoints -------------------------------------------------------------------------

    def create(self) -> dict[str, Any]:
        """``POST /deposit/depositions``: a new, empty draft."""
        return dict(self.request("POST", "deposit/depositions", payload={}))

    def get(self, deposition_id: int) -> dict[str, Any]:
        """``GET /deposit/depositions/:id``."""
        return dict(self.request("GET", f"deposit/depositions/{deposition_id}"))

    def files(self, deposition_id: int) -> list[dict[str, Any]]:
        """``GET /deposit/depositions/:id/files``: name, size and md5 of each file."""
        return list(self.request("GET", f"deposit/depositions/{deposition_id}/files"))

    def delete_file(self, deposition_id: int, file_id: str) -> None:
        """``DELETE /deposit/depositions/:id/files/:file_id`` (drafts only)."""
        self.request("DELETE", f"deposit/depositions/{deposition_id}/files/{file_id}")

    def upload(self, bucket_url: str, path: Path, name: str) -> dict[str, Any]:
        """``PUT <bucket>/<name>``, streamed, with Zenodo's md5 checked against the file's."""
        return dict(self.request("PUT", f"{bucket_url}/{urllib.parse.quote(name)}",
                                 upload=path, check_md5=True))

    def set_metadata(self, deposition_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
        """``PUT /deposit/depositions/:id`` with ``{"metadata": ...}``."""
        return dict(self.request("PUT", f"deposit/depositions/{deposition_id}",
                                 payload={"metadata": metadata}))

    def publish(self, deposition_id: int) -> dict[str, Any]:
        """``POST /deposit/depositions/:id/actions/publish``."""
        return dict(self.request("POST", f"deposit/depositions/{deposition_id}/actions/publish"))

    def new_version(self, deposition_id: int) -> dict[str, Any]:
        """``POST .../actions/newversion``, then the new draft from its ``latest_draft``."""
        original = self.request("POST", f"deposit/depositions/{deposition_id}/actions/newversion")
        link = ((original or {}).get("links") or {}).get("latest_draft")
        if not link:
            raise RunError(f"Zenodo gave no new draft for {deposition_id}",
                           "pass the id of the latest published version to --new-version-of")
        return dict(self.request("GET", link))


def _message(raw: bytes, scrub: Callable[[str], str]) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    text = str(body.get("message") or "")
    details = "; ".join(f"{e.get('field')}: {e.get('message')}"
                        for e in body.get("errors") or [] if isinstance(e, dict))
    return scrub(f": {text}" + (f" ({details})" if details else "")) if text else ""


# -- the deposit flow ---------------------------------------------------------------------

@dataclass(frozen=True)
class ArchiveFiles:
    """What to upload: the files (zip first), the metadata, where the resume state lives."""

    files: list[Path]
    metadata: dict[str, Any]
    state_path: Path


def archive_files(path: Path) -> ArchiveFiles:
    """The files and metadata of an archive given as its zip or its folder."""
    if path.is_dir():
        folder = path
        zpath = path.parent / f"{path.name}.zip"
        if not zpath.exists():
            raise UserError(f"{zpath} is missing (Zenodo gets the zip, not the folder)",
                            "build the archive with `crossbench archive RUN_DIR --out DIR`")
        metadata = json.loads((folder / ".zenodo.json").read_text())
        manifest = json.loads((folder / MANIFEST).read_text())
    elif path.suffix == ".zip" and path.is_file():
        zpath = path
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            top = names[0].split("/", 1)[0] if names else ""
            try:
                metadata = json.loads(zf.read(f"{top}/.zenodo.json"))
                manifest = json.loads(zf.read(f"{top}/{MANIFEST}"))
            except KeyError:
                raise UserError(f"{path} has no .zenodo.json or {MANIFEST}",
                                "upload an archive made by `crossbench archive`") from None
    else:
        raise UserError(f"{path} is not an archive zip or folder",
                        "give the .zip or the folder `crossbench archive` wrote")
    files = [zpath]
    for side in manifest.get("side_archives") or []:
        spath = zpath.parent / str(side["name"])
        if not spath.exists():
            raise UserError(f"the side archive {spath} is missing",
                            "keep it beside the zip: it holds the server logs")
        files.append(spath)
    return ArchiveFiles(files, metadata, zpath.with_name(zpath.stem + STATE_SUFFIX))


@dataclass
class DepositResult:
    """What the upload did."""

    deposition_id: int
    html: str | None
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    published: bool = False
    doi: str | None = None
    record_url: str | None = None


def _read_state(path: Path, base_url: str, new_version_of: int | None) -> dict[str, Any] | None:
    """The resume state of an earlier upload of the same archive to the same service (None:
    none, or one for another service or version); a damaged file is an error naming it."""
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        state = e
    if not isinstance(state, dict) or not isinstance(state.get("deposition_id", 0), int):
        raise UserError(f"{path}: not an upload state crossbench wrote (a JSON object with "
                        "deposition_id)",
                        "delete it to start a new draft (a draft it named stays on Zenodo "
                        "until you delete it there)")
    if state.get("base_url") != base_url or state.get("new_version_of") != new_version_of:
        return None
    return state


def deposit(dep: ArchiveFiles, client: ZenodoClient, *, publish: bool = False,
           new_version_of: int | None = None, log: Log = _quiet) -> DepositResult:
    """Deposit the archive (see the module docstring); resumes a draft kept in
    ``dep.state_path``."""
    state = _read_state(dep.state_path, client.base_url, new_version_of)
    draft: dict[str, Any] | None = None
    if state is not None:
        try:
            draft = client.get(int(state["deposition_id"]))
        except RunError:  # gone (deleted, or the sandbox was cleaned): start afresh
            draft = None
        if draft is not None and draft.get("state") == "done":
            log(f"deposition {draft['id']} is already published")
            return DepositResult(int(draft["id"]), (draft.get("links") or {}).get("html"),
                                 published=True, doi=draft.get("doi"),
                                 record_url=draft.get("record_url"))
        if draft is not None:
            log(f"resuming draft {draft['id']}")
    if draft is None:
        draft = client.new_version(new_version_of) if new_version_of else client.create()
        log(f"draft {draft['id']} created" + (f" as a new version of {new_version_of}"
                                              if new_version_of else ""))
    dep_id = int(draft["id"])
    state = {"base_url": client.base_url, "deposition_id": dep_id,
             "new_version_of": new_version_of, "files": {}}
    write_json_atomic(dep.state_path, state)
    result = DepositResult(dep_id, (draft.get("links") or {}).get("html"))
    bucket = (draft.get("links") or {}).get("bucket")
    if not bucket:
        raise RunError(f"deposition {dep_id} has no bucket link",
                       "the server does not offer the files API this client uses")
    present = {str(f.get("filename")): f for f in client.files(dep_id)}
    wanted = {p.name: p for p in dep.files}
    for name, f in sorted(present.items()):
        if name in wanted:
            continue
        if new_version_of:  # the previous version's file
            client.delete_file(dep_id, str(f["id"]))
            result.removed.append(name)
            log(f"removed {name} (previous version)")
        else:
            log(f"warning: {name} is on the draft but not in the archive; left as it is")
    for name, path in wanted.items():
        md5 = file_digest(path, "md5")  # Zenodo's checksum
        have = present.get(name)
        if have is not None and str(have.get("checksum", "")).removeprefix("md5:") == md5:
            result.skipped.append(name)
            log(f"{name}: already on the deposition (md5 {md5}), skipped")
        else:
            if have is not None:
                client.delete_file(dep_id, str(have["id"]))
            log(f"uploading {name} ({path.stat().st_size:,} bytes)")
            client.upload(bucket, path, name)
            result.uploaded.append(name)
        state["files"][name] = md5
        write_json_atomic(dep.state_path, state)
    final = {str(f.get("filename")): str(f.get("checksum", "")).removeprefix("md5:")
             for f in client.files(dep_id)}
    bad = [n for n in wanted if final.get(n) != state["files"][n]]
    if bad:
        raise RunError(f"after the upload, Zenodo's md5 of {', '.join(bad)} differs",
                       "run the same command again to re-send them")
    client.set_metadata(dep_id, dep.metadata)
    log("metadata set")
    if publish:
        done = client.publish(dep_id)
        result.published = True
        result.doi = done.get("doi")
        result.record_url = done.get("record_url") or (done.get("links") or {}).get(
            "record_html")
        state["published"] = {"doi": result.doi, "record_url": result.record_url}
        write_json_atomic(dep.state_path, state)
        log(f"published: {result.doi}")
    return result
