"""Renderers of statekit snapshots: listing, inspection, verification, disposal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from statekit.cli.renderers.markup import Column, _e, human_age, human_bytes, print_table, timestamp

if TYPE_CHECKING:
    from statekit.readers.inspection import OperatorInspection, SkewView, SnapshotInspection, StateInspection
    from statekit.readers.listing import CheckpointList
    from statekit.readers.verification import VerifyReport
    from statekit.writers.disposal import DisposalPlan

__all__ = ["checkpoint_list", "snapshot_inspection", "verify_report", "disposal_plan", "PER_OPERATOR_TABLES",
           "LISTING_COLUMNS"]

# Above this many operators, inspect prints one table of all states and one of all
# subtasks instead of two tables per operator.
PER_OPERATOR_TABLES = 20

_STATE_COLUMNS = [Column("state", key=True), Column("kind"), Column("serializer", drop=5), Column("type", drop=3),
                  Column("ttl", drop=4), Column("bytes", right=True), Column("entries", right=True),
                  Column("skew (max/mean)", drop=2), Column("histogram", drop=6)]
_STYLES = {"complete": "green", "incomplete": "yellow", "damaged": "red", "flink": "cyan"}
LISTING_COLUMNS = [Column("job", key=True), Column("id", key=True, right=True), Column("kind", drop=3),
                   Column("status"), Column("format", drop=4), Column("size", right=True, drop=1),
                   Column("age", right=True, drop=2), Column("path", key=True)]


def checkpoint_list(console: Console, result: CheckpointList) -> None:
    rows = []
    for c in result.listings:
        status = f"[{_STYLES.get(c.status, 'white')}]{c.status}[/]"
        if c.problem and c.status != "complete":
            status += f" ({_e(c.problem)})" if len(c.problem) < 60 else ""
        rows.append([_e(c.job_id[:12] or "-"), "-" if c.checkpoint_id is None else str(c.checkpoint_id), _e(c.kind),
                     status, _e(c.format or "-"), human_bytes(c.size), human_age(c.age_s), _e(c.path)])
    print_table(console, f"Snapshots in {result.path}", LISTING_COLUMNS, rows, markup=True)


def snapshot_inspection(console: Console, r: SnapshotInspection) -> None:
    console.print(f"[bold]{_e(r.kind)}[/] {_e(r.path)}", soft_wrap=True)
    console.print(f"job {_e(r.job_id)} {_e(r.job_name)}  checkpoint {_e(r.checkpoint_id)}  format {_e(r.format)}  "
                  f"created {_e(timestamp(r.created_at_ms))}  {human_bytes(r.bytes)}, {_e(r.entries)} entries")
    print_table(console, "Operators",
                [Column("uid", key=True), Column("name", drop=3), Column("parallelism", right=True),
                 Column("max parallelism", right=True, drop=2), Column("key serializer", drop=4),
                 Column("states", right=True, drop=1), Column("bytes", right=True), Column("entries", right=True)],
                [[op.uid, op.name, str(op.parallelism), str(op.max_parallelism), op.key_serializer or "-",
                  str(len(op.states)), human_bytes(op.bytes), str(op.entries)] for op in r.operators])
    if len(r.operators) > PER_OPERATOR_TABLES:
        print_table(console, "States", [Column("uid", key=True), *_STATE_COLUMNS],
                    [[op.uid, *_state_row(s)] for op in r.operators for s in op.states])
        print_table(console, "Subtasks", [Column("uid", key=True), Column("subtask", key=True),
                                          Column("key groups"), Column("state", key=True), Column("bytes / entries")],
                    [[op.uid, str(i), _key_groups(op, i), s.name, _subtask_cell(s, i)]
                     for op in r.operators for s in op.states for i in range(len(op.key_group_ranges))])
        for op in r.operators:
            _window_tables(console, op)
            _in_flight(console, op)
        return
    for op in r.operators:
        print_table(console, f"Operator {op.uid!r}", _STATE_COLUMNS, [_state_row(s) for s in op.states])
        print_table(console, None, [Column("subtask", key=True), Column("key groups"),
                                    *(Column(f"{s.name} bytes / entries") for s in op.states)],
                    [[str(i), _key_groups(op, i), *(_subtask_cell(s, i) for s in op.states)]
                     for i in range(len(op.key_group_ranges))])
        _window_tables(console, op)
        _in_flight(console, op)


def _in_flight(console: Console, op: OperatorInspection) -> None:
    """The in-flight records an unaligned checkpoint stored for the operator, per subtask."""
    if op.in_flight:
        print_table(console, f"In-flight records of {op.uid!r} (unaligned checkpoint)",
                    [Column("subtask", key=True), Column("bytes", right=True), Column("records", right=True)],
                    [[str(f["subtask"]), human_bytes(f["bytes"]), str(f["records"])] for f in op.in_flight])


def _window_tables(console: Console, op: OperatorInspection) -> None:
    """A window operator's window states (pairs, windows, range covered) and pending timers."""
    w = op.windows
    if w is None:
        return
    print_table(console, f"Windows of {op.uid!r}",
                [Column("state", key=True), Column("entries", right=True), Column("(key, window) pairs", right=True),
                 Column("windows", right=True), Column("global window pairs", right=True, drop=1),
                 Column("window range")],
                [[s.state, str(s.entries), str(s.key_window_pairs), str(s.windows), str(s.global_window_pairs),
                  _span(s.earliest_start, s.latest_end)] for s in w.states])
    print_table(console, f"Pending timers of {op.uid!r} ({w.pending_timers})",
                [Column("domain", key=True), Column("timers", right=True), Column("earliest"), Column("latest")],
                [[t.domain, str(t.count), _stamp(t.earliest), _stamp(t.latest)] for t in w.timers])
    if w.watermarks:
        print_table(console, f"Watermark of {op.uid!r} per subtask (when it snapshotted)", ["subtask", "watermark"],
                    [[str(i), "no watermark" if m is None else _stamp(m)] for i, m in enumerate(w.watermarks)])


def _stamp(ms: int | None) -> str:
    return "-" if ms is None else f"{timestamp(ms)} ({ms})"


def _span(start: int | None, end: int | None) -> str:
    return "-" if start is None or end is None else f"[{_stamp(start)}, {_stamp(end)})"


def _state_row(s: StateInspection) -> list[str]:
    skew = f"{s.skew.ratio:.2f} (kg {s.skew.max_key_group})" if s.skew and s.skew.max_key_group is not None else "-"
    return [s.name, s.kind, s.value_serializer, s.value_type or "-", f"{s.ttl_ms} ms" if s.ttl_ms else "-",
            human_bytes(s.bytes), str(s.entries), skew, _histogram(s.skew) if s.skew else "-"]


def _histogram(skew: SkewView) -> str:
    """Key groups per size bucket, labelled with the byte range the buckets span."""
    if skew.max_key_group is None:
        return "-"
    if skew.min_bytes == skew.max_bytes:
        return f"every key group {human_bytes(skew.max_bytes)}"
    return f"{_sparkline(skew.histogram)} {human_bytes(skew.min_bytes)}..{human_bytes(skew.max_bytes)}"


def _key_groups(op: OperatorInspection, i: int) -> str:
    """The key groups of subtask ``i``; ``-`` for an operator without keyed state (it has none)."""
    if op.key_serializer is None:
        return "-"
    kg = op.key_group_ranges[i]
    return f"{kg[0]}-{kg[1]}"


def _subtask_cell(s: StateInspection, i: int) -> str:
    return f"{human_bytes(s.per_subtask[i]['bytes'])} / {s.per_subtask[i]['entries']}"


def _sparkline(histogram: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(histogram) or 1
    return "".join(bars[min(8, (v * 8 + top - 1) // top)] for v in histogram)


def verify_report(console: Console, r: VerifyReport) -> None:
    if r.ok:
        console.print(f"[green]OK[/] {_e(r.path)}: {_e(r.files)} files, {human_bytes(r.bytes)}, every checksum matches", soft_wrap=True)
        return
    console.print(f"[red]DAMAGED[/] {_e(r.path)}: {_e(len(r.damage))} problem(s) in {_e(r.files)} files", soft_wrap=True)
    for d in r.damage:
        where = f" key group {d.key_group}" if d.key_group is not None else ""
        console.print(f"  {_e(d.path)}{_e(where)}: {_e(d.message)}", soft_wrap=True)


def disposal_plan(console: Console, r: DisposalPlan) -> None:
    verb = "would delete" if r.dry_run else "deleted"
    console.print(f"{_e(verb)} {_e(r.path)} ({_e(len(r.files))} files, {human_bytes(r.bytes)})", soft_wrap=True)
    if r.dry_run:
        for f in r.files:
            console.print(f"  {_e(f)}", soft_wrap=True)
