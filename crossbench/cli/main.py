"""Entry point of the ``crossbench`` command."""

from __future__ import annotations

import click

from crossbench import __version__
from crossbench.cli import (
    analyze_cmd,
    decompose_cmd,
    demo_cmd,
    doctor_cmd,
    engines_cmd,
    export_cmd,
    fit_cmd,
    fixtures_cmd,
    import_cmd,
    matrix_cmd,
    merge_cmd,
    plan_cmd,
    report_cmd,
    run_cmd,
    verify_curve_cmd,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="crossbench")
def cli() -> None:
    """Measure speculative decoding across inference engines, with numbers you can re-derive.

    \b
    Exit codes: 0 ok, 1 runtime failure, 2 usage error.
    """


cli.add_command(engines_cmd.engines)
cli.add_command(fixtures_cmd.fixtures)
cli.add_command(run_cmd.run)
cli.add_command(run_cmd.summarize)
cli.add_command(demo_cmd.demo)
cli.add_command(matrix_cmd.validate)
cli.add_command(matrix_cmd.matrix)
cli.add_command(matrix_cmd.status)
cli.add_command(merge_cmd.merge)
cli.add_command(plan_cmd.plan)
cli.add_command(doctor_cmd.doctor)
cli.add_command(analyze_cmd.analyze)
cli.add_command(analyze_cmd.compare)
cli.add_command(analyze_cmd.start_spread)
cli.add_command(decompose_cmd.decompose)
cli.add_command(fit_cmd.fit)
cli.add_command(verify_curve_cmd.verify_curve)
cli.add_command(analyze_cmd.import_)
analyze_cmd.import_.add_command(import_cmd.import_table)
analyze_cmd.import_.add_command(import_cmd.import_llama_logs)
cli.add_command(report_cmd.report)
cli.add_command(report_cmd.datapoint)
cli.add_command(report_cmd.archive)
cli.add_command(export_cmd.export)


def main() -> None:
    """Console-script entry."""
    cli()
