"""Who made an archive, under which licences, and the metadata files rendered from templates.

Templates are plain files in the repository's ``zenodo/`` folder (or ``--templates DIR``),
filled with :class:`string.Template` (docs/report.md "Templates"); each rendered file is
checked, so an edited template that breaks its format is refused with the template's name.
"""

from __future__ import annotations

import json
import re
import string
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench.errors import UserError
from crossbench.paths import data_root

TEMPLATES = {"README.md": "README.md.tmpl", "CITATION.cff": "CITATION.cff.tmpl",
             ".zenodo.json": "zenodo.json.tmpl",
             "ro-crate-metadata.json": "ro-crate-metadata.json.tmpl"}
"""Output file -> template file name."""

RELATIONS = (
    "isCitedBy", "cites", "isSupplementTo", "isSupplementedBy", "isContinuedBy", "continues",
    "isDescribedBy", "describes", "hasMetadata", "isMetadataFor", "isNewVersionOf",
    "isPreviousVersionOf", "isPartOf", "hasPart", "isReferencedBy", "references",
    "isDocumentedBy", "documents", "isCompiledBy", "compiles", "isVariantFormOf",
    "isOriginalFormof", "isIdenticalTo", "isAlternateIdentifier", "isReviewedBy", "reviews",
    "isDerivedFrom", "isSourceOf", "requires", "isRequiredBy", "isObsoletedBy", "obsoletes")
"""Zenodo's controlled vocabulary of ``related_identifiers[].relation``."""

_ORCID = re.compile(r"(?:https?://orcid\.org/)?(\d{4}-\d{4}-\d{4}-\d{3}[\dX])")
_SPDX = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def orcid_ok(orcid: str) -> bool:
    """The ISO 7064 11-2 check digit of an ORCID iD (``0000-0002-1825-0097``)."""
    digits = orcid.replace("-", "")
    total = 0
    for ch in digits[:-1]:
        total = (total + int(ch)) * 2
    check = (12 - total % 11) % 11
    return digits[-1] == ("X" if check == 10 else str(check))


@dataclass(frozen=True)
class Creator:
    """One creator: name as ``Family, Given``, optional affiliation and ORCID iD."""

    name: str
    affiliation: str | None = None
    orcid: str | None = None

    @classmethod
    def parse(cls, text: str) -> Creator:
        """``'Family, Given;Affiliation;ORCID'`` (the last two optional)."""
        parts = [p.strip() for p in text.split(";")]
        if not parts[0] or len(parts) > 3:
            raise UserError(f"--creator {text!r} is not 'Name;Affiliation;ORCID'",
                            "write e.g. --creator 'Doe, Jane;Example University;"
                            "0000-0002-1825-0097' (affiliation and ORCID may be left out)")
        orcid = parts[2] if len(parts) > 2 and parts[2] else None
        if orcid is not None:
            m = _ORCID.fullmatch(orcid)
            if not m or not orcid_ok(m.group(1)):
                raise UserError(f"--creator {text!r}: {orcid!r} is not a valid ORCID iD",
                                "give the 16-digit iD as 0000-0002-1825-0097 (its last "
                                "character is a check digit)")
            orcid = m.group(1)
        affiliation = parts[1] if len(parts) > 1 and parts[1] else None
        return cls(parts[0], affiliation, orcid)

    @property
    def family_given(self) -> tuple[str | None, str | None]:
        """(family, given) names: ``Family, Given``; ``Given Family``; one word is family."""
        if "," in self.name:
            family, given = (s.strip() for s in self.name.split(",", 1))
            return family, given or None
        words = self.name.split()
        if len(words) == 1:
            return words[0], None
        return words[-1], " ".join(words[:-1])

    def zenodo(self) -> dict[str, str]:
        """Zenodo's creator object (name as ``Family, Given``)."""
        family, given = self.family_given
        out = {"name": f"{family}, {given}" if given else str(family)}
        if self.affiliation:
            out["affiliation"] = self.affiliation
        if self.orcid:
            out["orcid"] = self.orcid
        return out

    def cff(self) -> dict[str, str]:
        """A CITATION.cff person."""
        family, given = self.family_given
        out = {"family-names": str(family)}
        if given:
            out["given-names"] = given
        if self.affiliation:
            out["affiliation"] = self.affiliation
        if self.orcid:
            out["orcid"] = f"https://orcid.org/{self.orcid}"
        return out


@dataclass(frozen=True)
class Related:
    """A related identifier (the upstream pull request, the software, a paper)."""

    identifier: str
    relation: str = "isSupplementTo"

    @classmethod
    def parse(cls, text: str) -> Related:
        """``URL`` or ``URL;relation``."""
        ident, _, relation = (s.strip() for s in text.partition(";"))
        relation = relation or "isSupplementTo"
        if not ident or relation not in RELATIONS:
            raise UserError(f"--related {text!r} is not 'URL' or 'URL;relation'",
                            f"relations (Zenodo's vocabulary): {', '.join(RELATIONS[:8])}, ...")
        return cls(ident, relation)


def spdx(value: str, flag: str) -> str:
    """An SPDX licence identifier, checked for shape."""
    if not _SPDX.fullmatch(value):
        raise UserError(f"{flag} {value!r} is not an SPDX licence identifier",
                        "write e.g. CC0-1.0, CC-BY-4.0 or MIT (https://spdx.org/licenses)")
    return value


@dataclass(frozen=True)
class ArchiveMeta:
    """What the author says about the archive (the CLI's options)."""

    title: str
    creators: list[Creator]
    version: str
    date: str  # YYYY-MM-DD
    data_license: str
    code_license: str
    description: str
    keywords: list[str] = field(default_factory=list)
    related: list[Related] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.creators:
            raise UserError("an archive needs at least one creator",
                            "add --creator 'Family, Given;Affiliation;ORCID' (repeatable)")
        if not _DATE.fullmatch(self.date):
            raise UserError(f"--date {self.date!r} is not YYYY-MM-DD", "write e.g. 2026-01-31")

    @property
    def licences(self) -> list[str]:
        """The distinct licences (data first)."""
        return list(dict.fromkeys([self.data_license, self.code_license]))


def template_dir(override: Path | None = None) -> Path:
    """Where the templates are: ``override``, else crossbench's ``zenodo/`` (see ``data_root``)."""
    folder = override or data_root() / "zenodo"
    missing = [t for t in TEMPLATES.values() if not (folder / t).is_file()]
    if missing:
        raise UserError(f"templates missing in {folder}: {', '.join(missing)}",
                        "point --templates at a copy of crossbench's zenodo/ folder")
    return folder


def fill(folder: Path, template: str, values: dict[str, str]) -> str:
    """One template filled; a user error names an unknown placeholder and the template."""
    text = (folder / template).read_text(encoding="utf-8")
    try:
        return string.Template(text).substitute(values)
    except KeyError as e:
        raise UserError(f"{folder / template} uses ${e.args[0]}, which is not a known "
                        "placeholder", f"write $$ for a literal dollar; known: "
                        f"{', '.join('$' + k for k in sorted(values))}") from None
    except ValueError as e:
        raise UserError(f"{folder / template}: {e}", "write $$ for a literal dollar") from None


def _json(folder: Path, template: str, values: dict[str, str]) -> str:
    text = fill(folder, template, values)
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise UserError(f"{folder / template} does not render to JSON: {e}",
                        "check the edits to the template (placeholders stand for JSON values)"
                        ) from None
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def render_zenodo(folder: Path, meta: ArchiveMeta, notes: str) -> str:
    """``.zenodo.json``: Zenodo's deposition metadata (licence ids in Zenodo's lower case)."""
    j = json.dumps
    return _json(folder, TEMPLATES[".zenodo.json"], {
        "title_json": j(meta.title), "description_json": j(meta.description),
        "creators_json": j([c.zenodo() for c in meta.creators]),
        "version_json": j(meta.version), "date_json": j(meta.date),
        "license_json": j(meta.data_license.lower()), "keywords_json": j(meta.keywords),
        "related_json": j([{"identifier": r.identifier, "relation": r.relation}
                           for r in meta.related]),
        "notes_json": j(notes)})


def render_citation(folder: Path, meta: ArchiveMeta, abstract: str) -> str:
    """``CITATION.cff`` (cff-version 1.2.0), checked to parse and to keep its version."""
    j = json.dumps
    authors = []
    for c in meta.creators:
        items = list(c.cff().items())
        authors.append("\n".join(("  - " if i == 0 else "    ") + f"{k}: {j(v)}"
                                 for i, (k, v) in enumerate(items)))
    licences = meta.licences
    text = fill(folder, TEMPLATES["CITATION.cff"], {
        "title_yaml": j(meta.title), "version_yaml": j(meta.version), "date": meta.date,
        "abstract_yaml": j(abstract), "authors_yaml": "\n".join(authors),
        "license_yaml": j(licences[0] if len(licences) == 1 else licences),
        "keywords_yaml": j(meta.keywords)})
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"{folder / TEMPLATES['CITATION.cff']} does not render to YAML: {e}",
                        "check the edits to the template") from None
    if not isinstance(parsed, dict) or parsed.get("cff-version") != "1.2.0" or \
            not parsed.get("title") or not parsed.get("authors"):
        raise UserError(f"{folder / TEMPLATES['CITATION.cff']} lost cff-version 1.2.0, title "
                        "or authors", "keep those keys in the template")
    return text if text.endswith("\n") else text + "\n"


ENCODINGS = {".json": "application/json", ".jsonl": "application/x-ndjson",
             ".csv": "text/csv", ".md": "text/markdown", ".html": "text/html",
             ".png": "image/png", ".svg": "image/svg+xml", ".yaml": "application/yaml",
             ".cff": "application/yaml", ".log": "text/plain", ".txt": "text/plain",
             ".prom": "text/plain", ".sh": "text/x-shellscript", ".zip": "application/zip"}


def encoding(path: str) -> str:
    """The media type of a file by its suffix (``application/octet-stream`` otherwise)."""
    if path.endswith("SHA256SUMS"):
        return "text/plain"
    return ENCODINGS.get(Path(path).suffix, "application/octet-stream")


def crate_id(path: str) -> str:
    """A file's ``@id`` in the crate: its relative path, percent-encoded as a URI path."""
    return urllib.parse.quote(path, safe="/")


def render_crate(folder: Path, meta: ArchiveMeta, abstract: str,
                 files: list[dict[str, Any]], code_paths: tuple[str, ...]) -> str:
    """``ro-crate-metadata.json`` (RO-Crate 1.1): the dataset, its authors and licences, and a
    File entity per file (``files``: path, bytes or None, role)."""
    j = json.dumps
    people = []
    for i, c in enumerate(meta.creators, 1):
        person: dict[str, Any] = {"@id": f"https://orcid.org/{c.orcid}" if c.orcid
                                  else f"#creator-{i}", "@type": "Person", "name": c.name}
        if c.affiliation:
            person["affiliation"] = c.affiliation
        people.append(person)
    licences = [{"@id": f"https://spdx.org/licenses/{lic}", "@type": "CreativeWork",
                 "name": lic, "identifier": lic} for lic in meta.licences]
    entities: list[dict[str, Any]] = []
    for f in files:
        entity: dict[str, Any] = {"@id": crate_id(f["path"]), "@type": "File",
                                  "name": Path(f["path"]).name, "description": f["role"],
                                  "encodingFormat": encoding(f["path"])}
        if f.get("bytes") is not None:
            entity["contentSize"] = str(f["bytes"])
        if f["path"].startswith(code_paths) and meta.code_license != meta.data_license:
            entity["license"] = {"@id": f"https://spdx.org/licenses/{meta.code_license}"}
        entities.append(entity)
    return _json(folder, TEMPLATES["ro-crate-metadata.json"], {
        "title_json": j(meta.title), "abstract_json": j(abstract), "date_json": j(meta.date),
        "version_json": j(meta.version),
        "license_ref_json": j({"@id": f"https://spdx.org/licenses/{meta.data_license}"}),
        "author_refs_json": j([{"@id": p["@id"]} for p in people]),
        "keywords_text_json": j(", ".join(meta.keywords)),
        "has_part_json": j([{"@id": crate_id(f["path"])} for f in files]),
        "entities": ",\n    ".join(j(e) for e in [*people, *licences, *entities])})


def render_readme(folder: Path, values: dict[str, str]) -> str:
    """``README.md`` from its template."""
    text = fill(folder, TEMPLATES["README.md"], values)
    return text if text.endswith("\n") else text + "\n"
