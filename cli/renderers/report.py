"""Renderer of ``statekit report``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import _e, human_bytes

if TYPE_CHECKING:
    from statekit.writers.report import ReportResult

__all__ = ["report_result"]


def report_result(console: Console, r: ReportResult) -> None:
    history = f", {r.history} snapshot(s) of history" if r.history else ""
    history += f", checkpoint statistics of {r.timeline} checkpoint(s)" if r.timeline else ""
    console.print(f"[green]wrote[/] {_e(r.output)} ({human_bytes(r.bytes)}): {_e(r.engine)} snapshot, "
                  f"{r.operators} operator(s){history}\nfrom: {_e(r.source)}", soft_wrap=True)
