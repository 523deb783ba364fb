"""``statekit report`` (thin: parse, call one library function, render)."""

from __future__ import annotations

from typing import Any

import click

from statekit.cli.errors import catch_exception
from statekit.cli.options import common_options, storage_option
from statekit.cli.output import get_output

__all__ = ["report"]


@click.command()
@click.argument("path")
@click.option("-o", "--output", required=True, metavar="FILE", help="The HTML file to write (replaced atomically).")
@click.option("-p", "--parallelism", "parallelisms", type=click.IntRange(min=1), multiple=True, metavar="N",
              help="Parallelism of the rescale preview (repeatable; default 1, 2, 4, 8).")
@storage_option
@common_options
@catch_exception
def report(path: str, output: str, parallelisms: tuple[int, ...], **_: Any) -> None:
    """Write one self-contained HTML page about a snapshot, a checkpoint directory or a job.

    \b
    PATH is a statekit or Apache Flink savepoint or checkpoint (the page: operators,
    states, sizes, a key-group skew chart per keyed operator, the rescale preview, a window
    operator's watermark per subtask), a directory of checkpoints (its latest complete one,
    and the checkpoint history), or a job id of the registry (its checkpoint directory).
    When the registry knows the job (statekit snapshots name it), the page also charts its
    checkpoint durations and sizes over time (`statekit checkpoints history`'s records).
    The page needs no network: inline CSS and SVG, no script.
      statekit report /checkpoints/job-1 -o report.html
    """
    from statekit.runtime.control.checkpoint_history import report_with_statistics
    from statekit.writers.report import DEFAULT_PARALLELISMS, write_report

    chosen = tuple(sorted(set(parallelisms))) or DEFAULT_PARALLELISMS
    get_output().show(write_report(report_with_statistics(path, chosen), output))
