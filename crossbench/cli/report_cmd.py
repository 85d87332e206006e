"""``crossbench report``, ``crossbench datapoint`` and ``crossbench archive``: what the author
of a finished study publishes (a report, a PR datapoint, a verifiable archive on Zenodo)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors
from crossbench.errors import RunError, UserError


@click.command(epilog="""\b
Examples:
  crossbench report runs/smoke                  # runs/smoke/report/report.html (+ .md, plots/)
  crossbench report runs/smoke --out site/smoke # anywhere else
""")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of the report (default: RUN_DIR/report).")
@user_errors
def report(run_dir: Path, out: Path | None) -> None:
    """Write the study's report: a self-contained HTML file (no network needed to view it),
    its Markdown twin, the figures as PNG and SVG, and the PR datapoint.

    Uses RUN_DIR/analysis.json; without one it analyses the run in memory (default options)
    and writes nothing into RUN_DIR but the report's own folder. For other options run
    `crossbench analyze` yourself before. Same run directory, same bytes.
    """
    from crossbench.report.build import build_report
    from crossbench.store import rundir

    if out is not None and out.resolve() != (run_dir / rundir.REPORT_DIR).resolve():
        rundir.check_new_out(out, rundir.REPORT_KIND)  # refused before any work or message
    if not (run_dir / rundir.ANALYSIS).exists():
        progress(f"no {rundir.ANALYSIS} in {run_dir}: analysing it in memory (default "
                 "options; nothing is written into the run)")
    written = build_report(run_dir, out)
    html = next(p for p in written if p.name == "report.html")
    click.echo(str(html))
    progress(f"wrote {len(written)} files in {html.parent}")


@click.command(epilog="""\b
Examples:
  crossbench datapoint runs/smoke                        # every pair (at most 12)
  crossbench datapoint runs/smoke --cells '*/n4/*'       # globs on speculative cell ids
  crossbench datapoint runs/smoke | xclip -selection clipboard
""")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--cells", "cells", multiple=True,
              help="Speculative cell ids or globs (repeatable, or comma-separated).")
@user_errors
def datapoint(run_dir: Path, cells: tuple[str, ...]) -> None:
    """Print a Markdown block for an upstream pull request: one table, the environment, the
    exact server and client commands, the confound check's caveats and a DOI placeholder
    (under 60 lines)."""
    from crossbench.report.datapoint import datapoint as make
    from crossbench.report.study import load_study

    patterns = [p.strip() for c in cells for p in c.split(",") if p.strip()]
    click.echo(make(load_study(run_dir), patterns or None), nl=False)


class ArchiveGroup(click.Group):
    """``archive RUN_DIR ...`` builds (the ``build`` subcommand); ``archive verify`` and
    ``archive upload`` are subcommands of their own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Route a first argument that names no subcommand to ``build``."""
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


@click.group(cls=ArchiveGroup, epilog="""\b
Examples:
  crossbench archive runs/smoke --out deposit --creator 'Doe, Jane;Example Lab;0000-0002-1825-0097'
  crossbench archive runs/smoke --out deposit --creator 'Doe, Jane' \\
      --data-license CC0-1.0 --code-license MIT \\
      --related 'https://github.com/ggml-org/llama.cpp/pull/12345;isSupplementTo'
  crossbench archive verify deposit/smoke.zip
  ZENODO_TOKEN=... crossbench archive upload deposit/smoke.zip --sandbox
""")
def archive() -> None:
    """Archive a finished study for deposit: `archive RUN_DIR --out DIR` writes DIR/NAME/ and
    DIR/NAME.zip (deterministic); `archive verify PATH` checks one; `archive upload PATH`
    deposits one on Zenodo."""


@archive.command("build")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder that receives NAME/ and NAME.zip.")
@click.option("--creator", "creators", multiple=True, required=True,
              help="'Family, Given;Affiliation;ORCID' (repeatable; affiliation and ORCID "
              "optional).")
@click.option("--title", default=None, help="Title (default: 'Speculative decoding study: "
              "STUDY').")
@click.option("--description", default=None,
              help="Description for Zenodo (HTML allowed; default: the study's headline).")
@click.option("--version", "version", default="1", show_default=True,
              help="Version of this archive (Zenodo's version field).")
@click.option("--date", default=None,
              help="Publication date YYYY-MM-DD (default: the day the study's last trial ended).")
@click.option("--data-license", default="CC-BY-4.0", show_default=True,
              help="SPDX licence of the data, report and metadata.")
@click.option("--code-license", default=None,
              help="SPDX licence of scripts/ (default: the data licence).")
@click.option("--keyword", "keywords", multiple=True,
              help="Keyword added to the defaults (repeatable).")
@click.option("--related", "related", multiple=True,
              help="'URL' or 'URL;relation' (repeatable): the upstream PR, the software, a paper.")
@click.option("--name", default=None, help="Folder and zip name (default: the study's name).")
@click.option("--split-logs-over", default=None,
              help="Put server logs larger than this (e.g. 50MB) into NAME-logs.zip.")
@click.option("--templates", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Your copy of crossbench's zenodo/ templates.")
@user_errors
def archive_build(run_dir: Path, out: Path, creators: tuple[str, ...], title: str | None,
                  description: str | None, version: str, date: str | None, data_license: str,
                  code_license: str | None, keywords: tuple[str, ...], related: tuple[str, ...],
                  name: str | None, split_logs_over: str | None, templates: Path | None
                  ) -> None:
    """Write DIR/NAME/ (raw records, logs, telemetry, metrics, matrix, manifests, analysis,
    report, README.md, CITATION.cff, .zenodo.json, ro-crate-metadata.json, SHA256SUMS) and
    DIR/NAME.zip with the same files: same inputs, same bytes."""
    from crossbench.archive import build
    from crossbench.archive.metadata import ArchiveMeta, Creator, Related, spdx
    from crossbench.report.study import load_study
    from crossbench.store.rundir import make_out_dir

    make_out_dir(out)  # before anything is read: a file's child or /proc is one line
    study = load_study(run_dir)
    when = date or build.study_date(study)
    if when is None:
        raise UserError(f"{run_dir} records no date", "give --date YYYY-MM-DD")
    meta = ArchiveMeta(
        title=title or f"Speculative decoding study: {study.name}",
        creators=[Creator.parse(c) for c in creators], version=version, date=when,
        data_license=spdx(data_license, "--data-license"),
        code_license=spdx(code_license or data_license, "--code-license"),
        description=description or build.default_description(study),
        keywords=list(dict.fromkeys([*build.default_keywords(study), *keywords])),
        related=[Related.parse(r) for r in related])
    limit = build.parse_size(split_logs_over) if split_logs_over else None
    built = build.build_archive(run_dir, out, meta, name=name, templates=templates,
                                split_logs_over=limit, study=study)
    click.echo(str(built.zip))
    for side in built.side:
        click.echo(str(side))
    progress(f"{built.files} files in {built.folder}; check with `crossbench archive verify "
             f"{built.zip}`")


@archive.command("verify", epilog="""\b
Examples:
  crossbench archive verify deposit/smoke.zip
  crossbench archive verify deposit/smoke          # the folder
  crossbench archive verify deposit/smoke.zip --no-reanalysis
""")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--no-reanalysis", is_flag=True,
              help="Skip re-deriving the analysis (checksums, schemas and secrets only).")
@click.option("--max-size", default="8GiB", show_default=True,
              help="Most uncompressed bytes a zip may declare in all (a zip bomb is refused "
              "before anything is written).")
@click.option("--max-entries", type=click.IntRange(1), default=100_000, show_default=True,
              help="Most entries a zip may hold.")
@user_errors
def archive_verify(path: Path, no_reanalysis: bool, max_size: str, max_entries: int) -> None:
    """Check an archive (zip or folder): checksums, schema versions, that every number of
    analysis.json re-derives from the raw records, and that no secret-looking value is in
    it. Exit 1 naming the file and line of each failure. A zip is untrusted input: one
    over the limits, or holding a link, an unsafe or repeated name, is refused (exit 2)
    before anything of it is written."""
    from crossbench.archive.build import parse_size
    from crossbench.archive.verify import Limits, verify

    limits = Limits(entries=max_entries, bytes=parse_size(max_size))
    result = verify(path, rederive=not no_reanalysis, limits=limits)
    for check in result.checks:
        status = "skip" if check.skipped else "ok" if check.ok else "FAIL"
        detail = check.detail if check.ok else f"{len(check.problems)} problem(s)"
        click.echo(f"  {status:<5} {check.name}: {detail}")
    for note in result.notes:
        click.echo(f"  note  {note}")
    for problem in result.problems:
        click.echo(str(problem))
    if not result.ok:
        raise RunError(f"{path}: {len(result.problems)} problem(s), listed above",
                       "rebuild the archive from the run directory (`crossbench archive`); "
                       "never edit an archive by hand")
    click.echo(f"{path}: verified")


@archive.command("upload", epilog="""\b
Examples:
  export ZENODO_TOKEN=...                                    # deposit:write, deposit:actions
  crossbench archive upload deposit/smoke.zip --sandbox      # a draft on sandbox.zenodo.org
  crossbench archive upload deposit/smoke.zip --publish      # a DOI on zenodo.org
  crossbench archive upload deposit/smoke-v2.zip --new-version-of 1234567 --publish
  crossbench archive upload deposit/smoke.zip --base-url http://127.0.0.1:8123/api  # stand-in
""")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--sandbox", is_flag=True, help="Use sandbox.zenodo.org (test DOIs).")
@click.option("--publish", is_flag=True,
              help="Publish when uploaded (permanent: a published record cannot be deleted).")
@click.option("--new-version-of", type=int, default=None,
              help="Deposition id of the latest published version this one follows.")
@click.option("--base-url", default=None,
              help="API root of another server, e.g. the local stand-in "
              "(PYTHONPATH=tests python -m standins.zenodo).")
@click.option("--retries", type=click.IntRange(0, 20), default=5, show_default=True,
              help="Retries of a request that fails with 429, 5xx or a lost connection.")
@click.option("--backoff-s", type=click.FloatRange(0.0, 600.0), default=1.0,
              show_default=True, help="First wait before a retry (doubling, at most 60 s).")
@user_errors
def archive_upload(path: Path, sandbox: bool, publish: bool, new_version_of: int | None,
                   base_url: str | None, retries: int, backoff_s: float) -> None:
    """Deposit an archive on Zenodo (token from ZENODO_TOKEN): create a draft (or a new
    version), upload the zip (and side archive) streamed with checksums checked, set the
    metadata of .zenodo.json, and publish only with --publish. A partial upload resumes
    when run again."""
    from crossbench.archive import zenodo
    from crossbench.archive.verify import verify

    if sandbox and base_url:
        raise UserError("--sandbox and --base-url both name the server", "give one of them")
    token = os.environ.get(zenodo.TOKEN_VARIABLE, "")
    if not token:
        raise UserError(f"{zenodo.TOKEN_VARIABLE} is not set",
                        "create a token with the deposit:write and deposit:actions scopes "
                        "(zenodo.org, or sandbox.zenodo.org for --sandbox: Account > "
                        "Applications) and export ZENODO_TOKEN")
    files = zenodo.archive_files(path)
    checked = verify(files.files[0], rederive=False)
    if not checked.ok:
        for problem in checked.problems:
            click.echo(str(problem), err=True)
        raise RunError(f"{files.files[0]} does not verify ({len(checked.problems)} problems)",
                       "rebuild it with `crossbench archive`; nothing was uploaded")
    url = base_url or (zenodo.SANDBOX_API if sandbox else zenodo.ZENODO_API)
    client = zenodo.ZenodoClient(url, token, log=progress,
                                 retry=zenodo.Retry(attempts=retries + 1, base_s=backoff_s))
    result = zenodo.deposit(files, client, publish=publish, new_version_of=new_version_of,
                            log=progress)
    if result.published:
        click.echo(f"published: doi {result.doi} ({result.record_url})")
    else:
        click.echo(f"draft {result.deposition_id}: {result.html}")
        progress("not published: review the draft there and publish it, or run again with "
                 "--publish")
