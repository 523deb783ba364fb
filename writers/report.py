"""``statekit report``: one self-contained HTML page about a snapshot, written atomically.

The page is built from a :class:`SnapshotReport` (engine-neutral: statekit snapshots are
described here, Apache Flink ones by :mod:`statekit.flink.report`) and holds operators,
states, sizes, a key-group skew chart per keyed operator, the rescale preview for a few
parallelisms and, for a checkpoint directory, the checkpoint history; a window operator's
watermark per subtask; and, when the job's checkpoint statistics are known (its history file in
the job registry), charts of checkpoint durations and sizes over time.

Invariants:
    * the page needs no network: CSS is inline, charts are inline SVG, there is no script,
      no external URL and no font or image reference;
    * every text that comes from the snapshot (uids, names, paths) is HTML-escaped;
    * the page appears at the output path whole or not at all (temp file + rename).
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from statekit.readers.inspection import inspect_snapshot
from statekit.readers.savepoint_reader import SavepointReader
from statekit.statefmt.errors import BadInputError
from statekit.statefmt.fileio import FileIO
from statekit.statefmt.keygroups import compute_key_group_range_for_operator_index, subtask_skew
from statekit.statefmt.units import human_bytes
from statekit.writers.rescale import plan_rescale

__all__ = ["DEFAULT_PARALLELISMS", "HistoryPoint", "KeyedSizes", "ReportOperator", "ReportResult", "ReportState",
           "RescaleRow", "SnapshotReport", "TimelinePoint", "preview_from_sizes", "render_html", "statekit_report",
           "write_report"]

DEFAULT_PARALLELISMS = (1, 2, 4, 8)


@dataclass(frozen=True)
class ReportState:
    """One state of an operator; ``bytes``/``entries`` are None where the snapshot does not record them."""

    name: str
    kind: str
    detail: str
    bytes: int | None
    entries: int | None


@dataclass(frozen=True)
class KeyedSizes:
    """Bytes of keyed state per key group (index = key group, all ``max_parallelism`` of them)."""

    sizes: tuple[int, ...]

    @property
    def ratio(self) -> float:
        """Largest key group over the mean (1.0 = even; 0 without state)."""
        mean = sum(self.sizes) / len(self.sizes) if self.sizes else 0.0
        return max(self.sizes) / mean if mean else 0.0


@dataclass(frozen=True)
class RescaleRow:
    """The keyed bytes each subtask would hold at ``parallelism``."""

    parallelism: int
    subtask_bytes: tuple[int, ...]

    @property
    def skew(self) -> float:
        return subtask_skew(self.subtask_bytes)


@dataclass(frozen=True)
class ReportOperator:
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    bytes: int
    states: tuple[ReportState, ...]
    key_groups: KeyedSizes | None = None
    rescale: tuple[RescaleRow, ...] = ()
    note: str = ""
    # a window operator's watermark per subtask when it snapshotted (None: none yet)
    watermarks: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class HistoryPoint:
    """One snapshot of a checkpoint directory."""

    checkpoint_id: int | None
    status: str
    kind: str
    size: int
    path: str


@dataclass(frozen=True)
class TimelinePoint:
    """One checkpoint of the job's recorded statistics (its history file)."""

    checkpoint_id: int
    trigger_ms: int
    status: str
    savepoint: bool
    duration_ms: int | None
    state_size: int | None
    checkpointed_size: int | None

    @staticmethod
    def of(record: dict[str, Any]) -> TimelinePoint:
        def number(name: str) -> int | None:
            value = record.get(name)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        return TimelinePoint(int(record["id"]), number("trigger_timestamp") or 0, str(record.get("status")),
                             bool(record.get("is_savepoint")), number("end_to_end_duration"), number("state_size"),
                             number("checkpointed_size"))


@dataclass(frozen=True)
class SnapshotReport:
    path: str
    engine: str
    kind: str
    format: str
    checkpoint_id: int
    bytes: int
    operators: tuple[ReportOperator, ...]
    history: tuple[HistoryPoint, ...] = ()
    history_path: str | None = None
    facts: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    job_id: str | None = None  # a statekit snapshot's job (its statistics may be in the job registry)
    timeline: tuple[TimelinePoint, ...] = ()  # the job's checkpoint statistics, by trigger time
    timeline_path: str | None = None


@dataclass(frozen=True)
class ReportResult:
    """What ``statekit report`` wrote."""

    output: str
    source: str
    engine: str
    operators: int
    history: int
    bytes: int
    timeline: int = 0


# ---------------------------------------------------------------- statekit snapshots


def statekit_report(url: str, parallelisms: Sequence[int] = DEFAULT_PARALLELISMS,
                    storage_options: dict[str, Any] | None = None) -> SnapshotReport:
    """The report of a statekit snapshot: ``inspect`` figures plus the rescale planner's preview."""
    view = inspect_snapshot(url, skew=True, storage_options=storage_options)
    reader = SavepointReader.read(url, storage_options=storage_options)
    operators = []
    for op in view.operators:
        states = tuple(ReportState(s.name, s.kind, _detail(s.value_serializer, s.value_type, s.ttl_ms), s.bytes,
                                   s.entries) for s in op.states)
        keyed = reader.operator(op.uid).keyed
        sizes = _statekit_sizes(reader, op.uid, op.max_parallelism) if keyed else None
        rescale = tuple(_planned(reader, op.uid, p) for p in parallelisms if p <= op.max_parallelism) if keyed else ()
        watermarks = tuple(op.windows.watermarks) if op.windows is not None else ()
        operators.append(ReportOperator(op.uid, op.name, op.parallelism, op.max_parallelism, op.bytes, states,
                                        sizes, rescale, watermarks=watermarks))
    facts = (("job", f"{view.job_name} ({view.job_id})"), ("entries", f"{view.entries:,}"),
             ("created", _utc(view.created_at_ms)))
    return SnapshotReport(view.path, "statekit", view.kind, view.format, view.checkpoint_id, view.bytes,
                          tuple(operators), facts=facts, job_id=view.job_id)


def _detail(serializer: str, value_type: str | None, ttl_ms: int | None) -> str:
    parts = [serializer] + ([value_type] if value_type else []) + ([f"ttl {ttl_ms} ms"] if ttl_ms else [])
    return ", ".join(parts)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000)) if ms else "-"


def _statekit_sizes(reader: SavepointReader, uid: str, max_parallelism: int) -> KeyedSizes:
    """Bytes per key group over every keyed state of the operator (block indexes only)."""
    op = reader.operator(uid)
    sizes = [0] * max_parallelism
    for subtask in op.subtasks:
        for file in subtask.files:
            if not op.state(file.state).keyed:
                continue
            with reader.open_subtask_file(op, subtask, file) as state_file:
                for entry in state_file.index:
                    sizes[entry.key_group] += entry.length
    return KeyedSizes(tuple(sizes))


def _planned(reader: SavepointReader, uid: str, parallelism: int) -> RescaleRow:
    """The rescale planner's figures for ``uid`` at ``parallelism`` (what ``rescale --dry-run`` shows)."""
    plan = next(p for p in plan_rescale(reader, operator_parallelism={uid: parallelism}) if p.uid == uid)
    return RescaleRow(parallelism, tuple(s.bytes for s in plan.subtasks))


def preview_from_sizes(sizes: KeyedSizes, parallelisms: Sequence[int]) -> tuple[RescaleRow, ...]:
    """Bytes per subtask at each parallelism, from key-group sizes and Flink's range formula."""
    rows = []
    for p in parallelisms:
        if p > len(sizes.sizes):
            continue
        ranges = [compute_key_group_range_for_operator_index(len(sizes.sizes), p, i) for i in range(p)]
        rows.append(RescaleRow(p, tuple(sum(sizes.sizes[r.start:r.end + 1]) for r in ranges)))
    return tuple(rows)


# ---------------------------------------------------------------- the page


def write_report(report: SnapshotReport, output: str) -> ReportResult:
    """Render ``report`` and publish it at ``output`` (a local file path) atomically.

    Raises:
        BadInputError: ``output`` is a directory or its directory does not exist.
    """
    target = os.path.abspath(output)
    if os.path.isdir(target):
        raise BadInputError("is a directory; give the HTML file to write", path=output)
    if not os.path.isdir(os.path.dirname(target)):
        raise BadInputError("the output's directory does not exist", path=output)
    io, path = FileIO.for_path(target)
    data = render_html(report).encode("utf-8")
    io.write_atomic(path, data)
    return ReportResult(target, report.path, report.engine, len(report.operators), len(report.history), len(data),
                        len(report.timeline))


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1100px;
color:#1d232a;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse;margin:6px 0 12px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f6f8fa}
.muted{color:#57606a}code{font:12px ui-monospace,Menlo,Consolas,monospace}svg{display:block;margin:4px 0 10px}
"""


def render_html(report: SnapshotReport) -> str:
    """The whole page as text (no network reference of any kind)."""
    title = f"statekit report: {report.path}"
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{_e(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
             f"<h1>{_e(report.engine)} {_e(report.kind)} {report.checkpoint_id}</h1>",
             f'<p class="muted"><code>{_e(report.path)}</code></p>', _summary(report), _operators_table(report)]
    parts += [_operator_section(op) for op in report.operators]
    if report.history_path is not None:
        parts.append(_history(report))
    if report.timeline:
        parts.append(_timeline(report))
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _summary(report: SnapshotReport) -> str:
    rows = [("engine", report.engine), ("kind", report.kind), ("format", report.format),
            ("checkpoint id", str(report.checkpoint_id)), ("size", f"{human_bytes(report.bytes)} ({report.bytes:,} bytes)"),
            ("operators", str(len(report.operators))), *report.facts]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<h2>Summary</h2><table id="summary">{body}</table>'


def _operators_table(report: SnapshotReport) -> str:
    head = ("<tr><th>operator</th><th>name</th><th class=n>parallelism</th><th class=n>max parallelism</th>"
            "<th class=n>states</th><th class=n>bytes</th><th class=n>key-group skew</th></tr>")
    rows = []
    for op in report.operators:
        skew = f"{op.key_groups.ratio:.2f}" if op.key_groups else "-"
        rows.append(f"<tr><td>{_e(op.uid)}</td><td>{_e(op.name)}</td><td class=n>{op.parallelism}</td>"
                    f"<td class=n>{op.max_parallelism}</td><td class=n>{len(op.states)}</td>"
                    f"<td class=n>{op.bytes:,}</td><td class=n>{skew}</td></tr>")
    return f'<h2>Operators</h2><table id="operators">{head}{"".join(rows)}</table>'


def _operator_section(op: ReportOperator) -> str:
    parts = [f'<section class="operator" data-uid="{_e(op.uid)}">', f"<h2>Operator {_e(op.uid)}</h2>"]
    if op.note:
        parts.append(f'<p class="muted">{_e(op.note)}</p>')
    parts.append(_states_table(op))
    if op.key_groups is not None:
        parts.append(f"<h3>Key-group skew</h3><p>bytes per key group over {len(op.key_groups.sizes)} key groups; "
                     f"largest / mean = {op.key_groups.ratio:.2f}</p>")
        parts.append(_bar_chart(list(op.key_groups.sizes), "key group", "bytes", f"key groups of {op.uid}"))
    if op.rescale:
        parts.append(_rescale_table(op))
    if op.watermarks:
        rows = "".join(f"<tr><td class=n>{i}</td><td>{'no watermark' if w is None else _e(_utc_ms(w))}</td>"
                       f"<td class=n>{'-' if w is None else w}</td></tr>" for i, w in enumerate(op.watermarks))
        parts.append("<h3>Watermark per subtask</h3><p>the event time each subtask had reached when it snapshotted"
                     "</p><table class=\"watermarks\"><tr><th class=n>subtask</th><th>watermark (UTC)</th>"
                     f"<th class=n>epoch ms</th></tr>{rows}</table>")
    parts.append("</section>")
    return "".join(parts)


def _states_table(op: ReportOperator) -> str:
    if not op.states:
        return '<p class="muted">no state</p>'
    head = "<tr><th>state</th><th>kind</th><th>serializer / type</th><th class=n>bytes</th><th class=n>entries</th></tr>"
    rows = [f"<tr><td>{_e(s.name)}</td><td>{_e(s.kind)}</td><td>{_e(s.detail)}</td>"
            f"<td class=n>{'-' if s.bytes is None else f'{s.bytes:,}'}</td>"
            f"<td class=n>{'-' if s.entries is None else f'{s.entries:,}'}</td></tr>" for s in op.states]
    return f'<table class="states">{head}{"".join(rows)}</table>'


def _rescale_table(op: ReportOperator) -> str:
    head = ("<tr><th class=n>parallelism</th><th class=n>largest subtask (bytes)</th>"
            "<th class=n>smallest subtask (bytes)</th><th class=n>skew</th><th>bytes per subtask</th></tr>")
    rows = [f"<tr><td class=n>{r.parallelism}</td><td class=n>{max(r.subtask_bytes):,}</td>"
            f"<td class=n>{min(r.subtask_bytes):,}</td><td class=n>{r.skew:.2f}</td>"
            f"<td>{_e(', '.join(f'{b:,}' for b in r.subtask_bytes))}</td></tr>" for r in op.rescale]
    return f'<h3>Rescale preview</h3><table class="rescale">{head}{"".join(rows)}</table>'


def _history(report: SnapshotReport) -> str:
    points = report.history
    head = "<tr><th class=n>checkpoint</th><th>kind</th><th>status</th><th class=n>bytes</th><th>path</th></tr>"
    rows = [f"<tr><td class=n>{'-' if p.checkpoint_id is None else p.checkpoint_id}</td><td>{_e(p.kind)}</td>"
            f"<td>{_e(p.status)}</td><td class=n>{p.size:,}</td><td><code>{_e(p.path)}</code></td></tr>"
            for p in points]
    chart = _bar_chart([p.size for p in points], "checkpoint", "bytes", "checkpoint sizes",
                       labels=[str(p.checkpoint_id) if p.checkpoint_id is not None else "?" for p in points])
    return (f'<h2>Checkpoint history</h2><p class="muted"><code>{_e(report.history_path)}</code>: '
            f"{len(points)} snapshot(s)</p>{chart}<table id=\"history\">{head}{''.join(rows)}</table>")


def _utc_ms(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def _timeline(report: SnapshotReport) -> str:
    """The job's checkpoint statistics over time: durations and sizes, with a summary."""
    points = sorted(report.timeline, key=lambda p: (p.trigger_ms, p.checkpoint_id))
    completed = [p for p in points if p.status == "COMPLETED"]
    failed = len(points) - len(completed)
    parts = [f'<h2 id="checkpoint-statistics">Checkpoint statistics over time</h2><p class="muted">'
             f"<code>{_e(report.timeline_path)}</code>: {len(completed)} completed, {failed} failed "
             f"(failed ones: red marks on the axis)</p>"]
    rows = []
    for label, values, unit in (("end-to-end duration", [p.duration_ms for p in completed], "ms"),
                                ("state size", [p.state_size for p in completed], "bytes"),
                                ("checkpointed size", [p.checkpointed_size for p in completed], "bytes")):
        known = [v for v in values if v is not None]
        if known:
            rows.append(f"<tr><td>{label}</td><td class=n>{min(known):,} {unit}</td>"
                        f"<td class=n>{sum(known) / len(known):,.1f} {unit}</td><td class=n>{max(known):,} {unit}</td></tr>")
    parts.append('<table id="timeline-summary"><tr><th>figure</th><th class=n>min</th><th class=n>avg</th>'
                 f"<th class=n>max</th></tr>{''.join(rows)}</table>")
    parts.append("<h3>End-to-end duration</h3>")
    parts.append(_time_chart(points, lambda p: p.duration_ms, "ms", "end-to-end duration of each checkpoint"))
    parts.append("<h3>State size</h3>")
    parts.append(_time_chart(points, lambda p: p.state_size, "bytes", "state size of each checkpoint"))
    return "".join(parts)


def _time_chart(points: list[TimelinePoint], value: Any, unit: str, title: str) -> str:
    """An inline SVG chart of ``value(point)`` against trigger time: a line through completed
    checkpoints (savepoints as hollow marks), failed ones as red marks on the time axis."""
    width, height, left, bottom = 760, 180, 72, 30
    plot_w, plot_h = width - left - 10, height - bottom - 12
    shown = [(p, value(p)) for p in points if p.status == "COMPLETED" and value(p) is not None]
    times = [p.trigger_ms for p in points] or [0]
    start, span = min(times), max(max(times) - min(times), 1)
    top = max((v for _, v in shown), default=0) or 1

    def x(ms: int) -> float:
        return left + plot_w * (ms - start) / span

    def y(v: int) -> float:
        return 12 + plot_h - plot_h * v / top

    line = " ".join(f"{x(p.trigger_ms):.1f},{y(v):.1f}" for p, v in shown)
    marks = [f'<circle cx="{x(p.trigger_ms):.1f}" cy="{y(v):.1f}" r="2.5" fill="{"#fff" if p.savepoint else "#4078c0"}" '
             f'stroke="#4078c0"><title>{"savepoint" if p.savepoint else "checkpoint"} {p.checkpoint_id} at '
             f"{_e(_utc_ms(p.trigger_ms))} UTC: {v:,} {unit}</title></circle>" for p, v in shown]
    marks += [f'<rect x="{x(p.trigger_ms) - 1.5:.1f}" y="{12 + plot_h - 6}" width="3" height="6" fill="#cf222e">'
              f"<title>checkpoint {p.checkpoint_id} failed at {_e(_utc_ms(p.trigger_ms))} UTC</title></rect>"
              for p in points if p.status == "FAILED"]
    axis = (f'<line x1="{left}" y1="{12 + plot_h}" x2="{width - 10}" y2="{12 + plot_h}" stroke="#57606a"/>'
            f'<line x1="{left}" y1="12" x2="{left}" y2="{12 + plot_h}" stroke="#57606a"/>'
            f'<text x="{left - 4}" y="18" text-anchor="end" font-size="11">{_e(human_bytes(top) if unit == "bytes" else f"{top:,} ms")}</text>'
            f'<text x="{left - 4}" y="{12 + plot_h}" text-anchor="end" font-size="11">0</text>'
            f'<text x="{left}" y="{height - 8}" font-size="11">{_e(_utc_ms(start))}</text>'
            f'<text x="{width - 10}" y="{height - 8}" text-anchor="end" font-size="11">{_e(_utc_ms(max(times)))} UTC</text>')
    path = f'<polyline points="{line}" fill="none" stroke="#4078c0" stroke-width="1.5"/>' if len(shown) > 1 else ""
    return (f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{_e(title)}"><title>{_e(title)}</title>{axis}{path}{"".join(marks)}</svg>')


def _bar_chart(values: list[int], x_label: str, y_label: str, title: str, labels: list[str] | None = None) -> str:
    """An inline SVG bar chart of ``values`` (one bar each), with the maximum marked on the axis."""
    width, height, left, bottom = 760, 180, 64, 28
    plot_w, plot_h = width - left - 8, height - bottom - 10
    top = max(values) if values else 0
    step = plot_w / max(1, len(values))
    bars = []
    for i, value in enumerate(values):
        h = plot_h * value / top if top else 0.0
        x, y = left + i * step, 10 + plot_h - h
        name = labels[i] if labels else str(i)
        bars.append(f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(step - 1, 0.5):.2f}" height="{h:.2f}" fill="#4078c0">'
                    f"<title>{_e(x_label)} {_e(name)}: {value:,} {_e(y_label)}</title></rect>")
    axis = (f'<line x1="{left}" y1="{10 + plot_h}" x2="{width - 8}" y2="{10 + plot_h}" stroke="#57606a"/>'
            f'<line x1="{left}" y1="10" x2="{left}" y2="{10 + plot_h}" stroke="#57606a"/>'
            f'<text x="{left - 4}" y="16" text-anchor="end" font-size="11">{top:,}</text>'
            f'<text x="{left - 4}" y="{10 + plot_h}" text-anchor="end" font-size="11">0</text>'
            f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" font-size="11">'
            f"{_e(x_label)} ({len(values)})</text>")
    return (f'<svg width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
            f"<title>{_e(title)}</title>{axis}{''.join(bars)}</svg>")
