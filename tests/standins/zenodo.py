"""A local stand-in for Zenodo's deposit REST API, for tests and dry runs (not Zenodo).

It implements the subset ``crossbench archive upload`` uses, as developers.zenodo.org
documents it (same paths, status codes, representations and error bodies):

============================================================  ======  =========================
request                                                       answer  what
============================================================  ======  =========================
``GET    /api/deposit/depositions``                           200     the owner's depositions
``POST   /api/deposit/depositions``                           201     create (``{}`` or metadata)
``GET    /api/deposit/depositions/:id``                       200     one deposition
``PUT    /api/deposit/depositions/:id``                       200     set metadata (validated)
``GET    /api/deposit/depositions/:id/files``                 200     its files (md5 checksums)
``DELETE /api/deposit/depositions/:id/files/:file_id``        204     remove a draft's file
``PUT    /api/files/:bucket/:filename``                       201     upload (raw body, streamed)
``POST   /api/deposit/depositions/:id/actions/publish``       202     publish: DOI, record, lock
``POST   /api/deposit/depositions/:id/actions/newversion``    201     new draft (``latest_draft``)
============================================================  ======  =========================

Authentication: ``Authorization: Bearer TOKEN`` or ``?access_token=TOKEN`` (401 otherwise).
JSON bodies need ``Content-Type: application/json`` (415 otherwise). DOIs use the test prefix
10.5072 as the real sandbox does. The request log (:attr:`ZenodoStandIn.log`) keeps method,
path with query, status and body size, never headers.

Failure injection: :meth:`ZenodoStandIn.fail_upload` fails file-upload attempts with a
status (500, 503, 429 with ``Retry-After``) or drops the connection half-way through the
body; :meth:`ZenodoStandIn.rate_limit` answers the next requests with 429.

Run it by hand: ``python -m standins.zenodo --port 8123`` (token from
``ZENODO_TOKEN``), then ``crossbench archive upload PATH --base-url
http://127.0.0.1:8123/api``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from crossbench.archive.metadata import RELATIONS

UPLOAD_TYPES = ("publication", "poster", "presentation", "dataset", "image", "video",
                "software", "lesson", "physicalobject", "other")
DOI_PREFIX = "10.5072"


@dataclass
class Failure:
    """Fail file-upload attempts ``nth`` .. ``nth + times - 1`` (1-based, every PUT to a
    bucket counts): answer ``status``; with ``drop``, close the connection mid-body; with
    ``corrupt``, store the file without its last byte and answer 201 with that md5."""

    nth: int
    status: int = 500
    times: int = 1
    drop: bool = False
    retry_after: float | None = None
    corrupt: bool = False

    def hits(self, attempt: int) -> bool:
        """Whether this upload attempt fails."""
        return self.nth <= attempt < self.nth + self.times


@dataclass
class LoggedRequest:
    """One request as the stand-in saw it (no headers: tokens never enter the log)."""

    method: str
    path: str  # with its query string
    status: int
    body_bytes: int


@dataclass
class StoredFile:
    """A file in a bucket."""

    id: str
    key: str
    data: bytes

    @property
    def md5(self) -> str:
        """Hex md5 of the content, as Zenodo computes it."""
        return hashlib.md5(self.data).hexdigest()


@dataclass
class Deposition:
    """A deposition (draft or published) with its bucket."""

    id: int
    concept: int
    bucket: str
    created: str
    metadata: dict[str, Any] = field(default_factory=dict)
    files: dict[str, StoredFile] = field(default_factory=dict)
    state: str = "unsubmitted"
    latest_draft: int | None = None


class _Dropped(Exception):
    """The handler closed the connection on purpose."""


class ZenodoStandIn:
    """The stand-in server (see the module docstring). Use as a context manager."""

    def __init__(self, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.token = token
        self.log: list[LoggedRequest] = []
        self.depositions: dict[int, Deposition] = {}
        self.failures: list[Failure] = []
        self.upload_attempts = 0
        self._rate_limited = 0
        self._retry_after = 1.0
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The API root, e.g. ``http://127.0.0.1:PORT/api``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/api"

    def start(self) -> ZenodoStandIn:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ZenodoStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_upload(self, nth: int, status: int = 500, times: int = 1, drop: bool = False,
                    retry_after: float | None = None, corrupt: bool = False) -> None:
        """Fail upload attempts ``nth`` onwards, ``times`` of them (see :class:`Failure`)."""
        self.failures.append(Failure(nth, status, times, drop, retry_after, corrupt))

    def clear_failures(self) -> None:
        """Stop injecting failures."""
        self.failures.clear()
        self._rate_limited = 0

    def rate_limit(self, requests: int, retry_after: float = 1.0) -> None:
        """Answer the next ``requests`` requests with 429 and ``Retry-After``."""
        self._rate_limited = requests
        self._retry_after = retry_after

    # -- the API ------------------------------------------------------------------------

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())

    def _new(self, concept: int | None = None, metadata: dict[str, Any] | None = None
             ) -> Deposition:
        dep_id = next(self._ids)
        dep = Deposition(dep_id, concept or dep_id, f"{dep_id:08x}-bucket", self._now(),
                         dict(metadata or {}))
        dep.metadata["prereserve_doi"] = {"doi": f"{DOI_PREFIX}/zenodo.{dep_id}",
                                          "recid": dep_id}
        self.depositions[dep_id] = dep
        return dep

    def file_json(self, root: str, dep: Deposition, f: StoredFile) -> dict[str, Any]:
        """A deposition file resource."""
        return {"id": f.id, "filename": f.key, "filesize": len(f.data), "checksum": f.md5,
                "links": {"self": f"{root}/deposit/depositions/{dep.id}/files/{f.id}",
                          "download": f"{root}/files/{dep.bucket}/{f.key}"}}

    def deposition_json(self, root: str, dep: Deposition) -> dict[str, Any]:
        """A deposition resource, as Zenodo represents it."""
        base = f"{root}/deposit/depositions/{dep.id}"
        html = root.removesuffix("/api")
        links = {"self": base, "html": f"{html}/deposit/{dep.id}",
                 "files": f"{base}/files", "bucket": f"{root}/files/{dep.bucket}",
                 "publish": f"{base}/actions/publish", "edit": f"{base}/actions/edit",
                 "discard": f"{base}/actions/discard",
                 "newversion": f"{base}/actions/newversion",
                 "latest_draft": f"{root}/deposit/depositions/{dep.latest_draft or dep.id}",
                 "latest_draft_html": f"{html}/deposit/{dep.latest_draft or dep.id}"}
        out: dict[str, Any] = {
            "id": dep.id, "conceptrecid": str(dep.concept), "created": dep.created,
            "modified": self._now(), "owner": 1, "state": dep.state,
            "submitted": dep.state == "done", "title": dep.metadata.get("title", ""),
            "metadata": dep.metadata,
            "files": [self.file_json(root, dep, f) for f in dep.files.values()],
            "links": links}
        if dep.state == "done":
            doi = f"{DOI_PREFIX}/zenodo.{dep.id}"
            out.update(doi=doi, doi_url=f"https://doi.org/{doi}", record_id=dep.id,
                       record_url=f"{html}/records/{dep.id}")
            links["record"] = f"{root}/records/{dep.id}"
            links["record_html"] = f"{html}/records/{dep.id}"
        return out


def validate_metadata(meta: Any) -> list[dict[str, Any]]:
    """Zenodo-style field errors of a deposition metadata object (empty when valid)."""
    if not isinstance(meta, dict):
        return [{"field": "metadata", "message": "Not a valid object.", "code": 10}]
    errors = []
    if "upload_type" in meta and meta["upload_type"] not in UPLOAD_TYPES:
        errors.append({"field": "metadata.upload_type", "message": "Not a valid choice.",
                       "code": 10})
    creators = meta.get("creators")
    if creators is not None and (not isinstance(creators, list) or not all(
            isinstance(c, dict) and c.get("name") for c in creators)):
        errors.append({"field": "metadata.creators", "message": "Each creator needs a name.",
                       "code": 10})
    for i, rel in enumerate(meta.get("related_identifiers") or []):
        if not isinstance(rel, dict) or not rel.get("identifier") or \
                rel.get("relation") not in RELATIONS:
            errors.append({"field": f"metadata.related_identifiers.{i}",
                           "message": "Not a valid related identifier.", "code": 10})
    if "publication_date" in meta and not re.fullmatch(r"\d{4}-\d{2}-\d{2}",
                                                       str(meta["publication_date"])):
        errors.append({"field": "metadata.publication_date", "message": "Not a valid date.",
                       "code": 10})
    return errors


def missing_for_publish(dep: Deposition) -> list[dict[str, Any]]:
    """Why a deposition cannot be published yet (empty when it can)."""
    errors = [{"field": f"metadata.{k}", "message": "Field is required.", "code": 10}
              for k in ("upload_type", "title", "creators", "description")
              if not dep.metadata.get(k)]
    if not dep.files:
        errors.append({"field": "files", "message": "Minimum one file must be provided.",
                       "code": 10})
    return errors


class _Handler(BaseHTTPRequestHandler):
    """Routes the API subset (see the module docstring)."""

    owner: ZenodoStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Write nothing to stderr (the stand-in keeps its own log, without headers)."""
        return None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    # -- plumbing --------------------------------------------------------------------------

    @property
    def _root(self) -> str:
        return f"http://{self.headers.get('Host')}/api"

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None
              ) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._status = status

    def _error(self, status: int, message: str, errors: list[dict[str, Any]] | None = None,
               headers: dict[str, str] | None = None) -> None:
        body: dict[str, Any] = {"message": message, "status": status}
        if errors:
            body["errors"] = errors
        self._send(status, body, headers)

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        auth = self.headers.get("Authorization", "")
        given = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else \
            (query.get("access_token") or [""])[0]
        return bool(given) and given == self.owner.token

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self) -> Any:
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            self._error(415, "Request must have Content-Type application/json.")
            return None
        try:
            return json.loads(self._body() or b"{}")
        except ValueError:
            self._error(400, "Request body is not valid JSON.")
            return None

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        self._status = 0
        size = int(self.headers.get("Content-Length") or 0)
        try:
            with self.owner._lock:
                self._dispatch(method, url.path, query)
        except _Dropped:
            self._status = -1
        finally:
            self.owner.log.append(LoggedRequest(method, self.path, self._status, size))

    def _dispatch(self, method: str, path: str, query: dict[str, list[str]]) -> None:
        st = self.owner
        if st._rate_limited > 0:
            st._rate_limited -= 1
            self._body()
            self._error(429, "Too many requests.",
                        headers={"Retry-After": str(st._retry_after)})
            return
        if not self._authorized(query):
            self._body()
            self._error(401, "The server could not verify that you are authorized to access "
                        "the URL requested.")
            return
        m = re.fullmatch(r"/api/files/([^/]+)/(.+)", path)
        if m and method == "PUT":
            self._upload(m.group(1), urllib.parse.unquote(m.group(2)))
            return
        m = re.fullmatch(r"/api/deposit/depositions/?", path)
        if m:
            if method == "POST":
                body = self._json_body()
                if body is None:
                    return
                errors = validate_metadata(body.get("metadata", {}))
                if errors:
                    self._error(400, "Validation error.", errors)
                    return
                dep = st._new(metadata=body.get("metadata"))
                self._send(201, st.deposition_json(self._root, dep))
            elif method == "GET":
                self._send(200, [st.deposition_json(self._root, d)
                                 for d in st.depositions.values()])
            else:
                self._error(405, "Method not allowed.")
            return
        m = re.fullmatch(r"/api/deposit/depositions/(\d+)(/.*)?", path)
        found = st.depositions.get(int(m.group(1))) if m else None
        if m is None or found is None:
            self._body()
            self._error(404, "Deposition not found" if m else "Not found")
            return
        rest, dep = m.group(2) or "", found
        if rest == "" and method == "GET":
            self._send(200, st.deposition_json(self._root, dep))
        elif rest == "" and method == "PUT":
            self._update(dep)
        elif rest == "/files" and method == "GET":
            self._send(200, [st.file_json(self._root, dep, f) for f in dep.files.values()])
        elif rest.startswith("/files/") and method == "DELETE":
            self._delete_file(dep, rest.removeprefix("/files/"))
        elif rest == "/actions/publish" and method == "POST":
            self._publish(dep)
        elif rest == "/actions/newversion" and method == "POST":
            self._new_version(dep)
        else:
            self._body()
            self._error(404 if method in ("GET", "POST") else 405, "Not found")

    # -- endpoints ---------------------------------------------------------------------------

    def _update(self, dep: Deposition) -> None:
        body = self._json_body()
        if body is None:
            return
        if dep.state == "done":
            self._error(400, "Deposition is published; open it for editing first.")
            return
        meta = body.get("metadata") if isinstance(body, dict) else None
        errors = validate_metadata(meta)
        if errors:
            self._error(400, "Validation error.", errors)
            return
        assert isinstance(meta, dict)
        dep.metadata = {**meta, "prereserve_doi": dep.metadata.get("prereserve_doi")}
        self._send(200, self.owner.deposition_json(self._root, dep))

    def _upload(self, bucket: str, key: str) -> None:
        st = self.owner
        dep = next((d for d in st.depositions.values() if d.bucket == bucket), None)
        st.upload_attempts += 1
        attempt = st.upload_attempts
        failure = next((f for f in st.failures if f.hits(attempt)), None)
        length = int(self.headers.get("Content-Length") or 0)
        if failure is not None and failure.drop:
            self.rfile.read(length // 2)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            raise _Dropped
        data = self.rfile.read(length)
        if failure is not None and failure.corrupt:
            data = data[:-1]
        elif failure is not None:
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else None
            if failure.status >= 500:
                self._send(failure.status, None, headers)
            else:
                self._error(failure.status, "Injected failure.", headers=headers)
            return
        if dep is None:
            self._error(404, "Bucket not found.")
            return
        if dep.state == "done":
            self._error(403, "Bucket is locked: the deposition is published.")
            return
        old = dep.files.get(key)
        stored = StoredFile(old.id if old else f"{dep.id}-{len(dep.files) + 1:04d}", key, data)
        dep.files[key] = stored
        root = self._root
        self._send(201, {
            "key": key, "size": len(data), "checksum": f"md5:{stored.md5}",
            "mimetype": "application/zip" if key.endswith(".zip") else
            "application/octet-stream", "is_head": True, "delete_marker": False,
            "version_id": f"{stored.id}-v{attempt}", "created": st._now(),
            "updated": st._now(),
            "links": {"self": f"{root}/files/{bucket}/{key}",
                      "version": f"{root}/files/{bucket}/{key}?versionId={stored.id}",
                      "uploads": f"{root}/files/{bucket}/{key}?uploads"}})

    def _delete_file(self, dep: Deposition, file_id: str) -> None:
        if dep.state == "done":
            self._error(403, "Deleting a file of a published deposition is not allowed.")
            return
        key = next((k for k, f in dep.files.items() if f.id == file_id), None)
        if key is None:
            self._error(404, "Deposition file does not exist.")
            return
        del dep.files[key]
        self._send(204)

    def _publish(self, dep: Deposition) -> None:
        self._body()
        if dep.state == "done":
            self._error(400, "Deposition is already published.")
            return
        errors = missing_for_publish(dep)
        if errors:
            self._error(400, "Validation error.", errors)
            return
        dep.state = "done"
        for d in self.owner.depositions.values():  # the concept's versions point here
            if d.concept == dep.concept:
                d.latest_draft = None
        self._send(202, self.owner.deposition_json(self._root, dep))

    def _new_version(self, dep: Deposition) -> None:
        self._body()
        st = self.owner
        if dep.state != "done":
            self._error(400, "Only a published deposition can have a new version.")
            return
        draft = st.depositions.get(dep.latest_draft or -1)
        if draft is None or draft.state == "done":
            meta = {k: v for k, v in dep.metadata.items() if k not in ("doi", "prereserve_doi")}
            draft = st._new(concept=dep.concept, metadata=meta)
            draft.files = {k: StoredFile(f"{draft.id}-{i:04d}", k, f.data)
                           for i, (k, f) in enumerate(dep.files.items(), 1)}
            dep.latest_draft = draft.id
        self._send(201, st.deposition_json(self._root, dep))


def main() -> None:
    """Serve the stand-in until interrupted (token from ``ZENODO_TOKEN`` or ``--token``)."""
    parser = argparse.ArgumentParser(description="A local stand-in for Zenodo's deposit API.")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--token", default=os.environ.get("ZENODO_TOKEN"))
    args = parser.parse_args()
    if not args.token:
        parser.error("set ZENODO_TOKEN or pass --token (the token the stand-in accepts)")
    standin = ZenodoStandIn(args.token, port=args.port).start()
    print(f"Zenodo stand-in (not Zenodo) at {standin.base_url}; Ctrl-C stops it", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        standin.stop()


if __name__ == "__main__":
    main()
