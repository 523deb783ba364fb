"""Renderers of Apache Flink results, the mixed snapshot listing and key-group lookups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from statekit.cli.renderers.markup import Column, human_age, human_bytes, print_table
from statekit.cli.renderers.snapshots import LISTING_COLUMNS

if TYPE_CHECKING:
    from statekit.flink.key_group_lookup import KeyGroupLookup
    from statekit.flink.offline_results import FlinkDisposal, FlinkInspection, FlinkVerifyReport, SnapshotList
    from statekit.flink.plan_check import CompiledPlanReport
    from statekit.flink.relocation import FlinkRelocation
    from statekit.flink.sql_operators import SqlOperatorView
    from statekit.flink.summary import FlinkOperatorSummary
    from statekit.flink.upgrade import FlinkUpgradeReport

__all__ = ["snapshot_list", "flink_inspection", "flink_verify_report", "flink_disposal", "flink_relocation",
           "key_group_lookup", "flink_upgrade_report",
           "compiled_plan_report"]

_STATUS_STYLES = {"complete": "green", "incomplete": "yellow", "damaged": "red"}


def _bytes(n: int) -> str:
    return human_bytes(n) if n else "-"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _range(kg: Sequence[int] | None) -> str:
    return "-" if not kg else f"{kg[0]}-{kg[1]}"


_LISTING_COLUMNS = [Column("engine", drop=5), *LISTING_COLUMNS]


def snapshot_list(console: Console, result: SnapshotList) -> None:
    rows = []
    for row in result.listings:
        status = f"[{_STATUS_STYLES.get(row.status, 'white')}]{row.status}[/]"
        if row.problem and row.status == "damaged":
            status += f" ({escape(row.problem[:80])})"
        rows.append([escape(row.engine), escape(row.job_id[:12] or "-"),
                     "-" if row.checkpoint_id is None else str(row.checkpoint_id), escape(row.kind), status,
                     escape(row.format or "-"), human_bytes(row.size), human_age(row.age_s), escape(row.path)])
    print_table(console, f"Snapshots in {result.path}", _LISTING_COLUMNS, rows, markup=True)


def flink_inspection(console: Console, result: FlinkInspection) -> None:
    s = result.summary
    console.print(f"[bold]Flink {escape(s.kind or 'snapshot')}[/] ({escape(s.format)}) {escape(s.path)}", soft_wrap=True)
    console.print(
        f"checkpoint {s.checkpoint_id}  metadata v{s.metadata_version} ({human_bytes(s.metadata_bytes)})  "
        f"{len(s.operators)} operators  {human_bytes(s.bytes)}: inline {human_bytes(s.inline_bytes)}, "
        f"files {human_bytes(s.file_bytes)}, shared {human_bytes(s.shared_bytes)}"
    )
    if s.moved:
        console.print(f"[yellow]{escape(s.moved)}[/]", soft_wrap=True)
    rows = []
    for index, op in enumerate(s.operators):
        ranges = result.key_group_ranges(index)
        counts = [(len(op.keyed_states), "keyed"), (len(result.operator_states(index)), "operator")]
        states = ", ".join(f"{n} {what}" for n, what in counts if n)
        rows.append([op.label, op.name or "-", str(op.parallelism), str(op.max_parallelism),
                     (", ".join(_range(r) for r in ranges[:4]) + (" ..." if len(ranges) > 4 else ""))
                     if _keyed(op) else "-",
                     states or "-", _bytes(op.bytes), _bytes(op.inline_bytes), _bytes(op.file_bytes),
                     _bytes(op.shared_bytes)])
    print_table(console, "Operators", [
        Column("uid / id", key=True), Column("name", drop=4), Column("parallelism", right=True),
        Column("max parallelism", right=True, drop=3), Column("key groups", drop=5), Column("states", drop=2),
        Column("bytes", right=True), Column("inline", right=True, drop=6), Column("files", right=True, drop=7),
        Column("shared", right=True, drop=8)], rows)
    for index, op in enumerate(s.operators):
        if op.bytes or op.keyed_states or op.keyed_state_problem or op.splits_problem:
            _operator_detail(console, result, index)
    for view in s.sql_operators:
        _sql_operator(console, view)


def _sql_operator(console: Console, v: SqlOperatorView) -> None:
    fields = ", ".join(v.accumulators) or "not named (see the plan)"
    console.print(f"[bold]SQL[/] {escape(v.name or v.operator_id)}: plan node {v.plan_node} {escape(v.node_type)}; "
                  f"key {escape(v.key_type or '?')}; accumulators {escape(fields)}"
                  + (f"; window {escape(v.window)}" if v.window else ""), soft_wrap=True)
    if v.slices:
        print_table(console, f"{v.name or v.operator_id}: window-aggs by slice end", [
            Column("slice end", key=True), Column("covers"), Column("holds", drop=1), Column("keys", right=True)],
            [[s.slice_end_time, f"[{_utc(s.start)}, {_utc(s.end)})" if s.start is not None and s.end is not None
              else "-", s.holds or "-", str(s.keys)] for s in v.slices])
    if v.event_timers:
        print_table(console, f"{v.name or v.operator_id}: event-time window timers", [
            Column("window end", key=True), Column("fires at watermark", right=True), Column("keys", right=True)],
            [[t.window_end_time, str(t.timestamp), str(t.keys)] for t in v.event_timers])


def _utc(ms: int) -> str:
    from statekit.flink.sql_operators import epoch_ms_text

    return epoch_ms_text(ms)


def _keyed(op: FlinkOperatorSummary) -> bool:
    """Whether ``op`` has keyed state: only then do its subtasks own key groups worth showing."""
    return bool(op.keyed_states) or any(sub.keyed_handle for sub in op.subtasks)


def _operator_detail(console: Console, result: FlinkInspection, index: int) -> None:
    op = result.summary.operators[index]
    if op.uid or not op.name:
        title = f"Operator {op.label}" + (f" (id {op.operator_id})" if op.uid else "")
    else:  # a generated id (SQL operators): the operator's name says what it is
        title = f"Operator {op.name} (id {op.operator_id})"
    if op.keyed_states:
        rows = []
        for st in op.keyed_states:
            serializers = ", ".join(f"{ser.key.split('_')[0].lower()}={ser.short_name}" for ser in st.serializers)
            rows.append([st.name, st.kind, serializers or "-", st.problem or "-"])
        print_table(console, f"{title}: keyed state",
                    [Column("state", key=True), Column("kind"), Column("serializers"), Column("problem")], rows)
    if op.keyed_state_problem:
        console.print(f"[yellow]{escape(title)}: keyed state names: {escape(op.keyed_state_problem)}[/]", soft_wrap=True)
    if op.splits:
        print_table(console, f"{title}: source splits",
                    [Column("subtask", right=True), Column("connector"), Column("split", key=True),
                     Column("position", key=True)],
                    [[str(split.subtask), split.connector, split.split_id or "-", split.describe]
                     for split in op.splits])
    if op.splits_problem:
        console.print(f"[yellow]{escape(title)}: {escape(op.splits_problem)}[/]", soft_wrap=True)
    operator_states = result.operator_states(index)
    rows = []
    for sub in op.subtasks:
        names = ", ".join(f"{o.name} ({o.mode})" for o in sub.operator_states)
        handle = sub.keyed_handle or "-"
        if sub.finished:
            handle = "finished"
        rows.append([str(sub.index), _range(None if sub.key_group_range is None or not sub.keyed_handle
                                            else (sub.key_group_range.start, sub.key_group_range.end)),
                     handle, _bytes(sub.bytes), _bytes(sub.inline_bytes), _bytes(sub.file_bytes),
                     _bytes(sub.shared_bytes), names or "-"])
    if op.subtasks:
        print_table(console, f"{title}: subtasks", [
            Column("subtask", key=True), Column("key groups"), Column("handle", drop=4),
            Column("bytes", right=True), Column("inline", right=True, drop=2), Column("files", right=True, drop=3),
            Column("shared", right=True, drop=1), Column("operator state")], rows)
    elif operator_states:
        console.print(f"{escape(title)}: operator state {escape(', '.join(operator_states))}", soft_wrap=True)


def flink_verify_report(console: Console, r: FlinkVerifyReport) -> None:
    if r.moved:
        console.print(f"[yellow]{escape(r.moved)}[/]")
    if r.ok:
        blocks = (f"; the block checksums of {_count(r.rocksdb_stores, 'RocksDB store')} match" if r.rocksdb_stores
                  else "")
        console.print(f"[green]OK[/] {escape(r.path)}: {_count(r.files, 'file')}, {human_bytes(r.bytes)} present with "
                      f"their recorded sizes (+ {human_bytes(r.inline_bytes)} inline){blocks}; "
                      "Flink's _metadata records no checksums", soft_wrap=True)
        return
    console.print(f"[red]DAMAGED[/] {escape(r.path)}: {_count(len(r.problems), 'problem')} in {_count(r.files, 'file')}", soft_wrap=True)
    for p in r.problems:
        console.print(f"  {p.kind}: {escape(p.message)}", soft_wrap=True)
    if r.hint:
        console.print(f"[yellow]hint:[/] {escape(r.hint)}", soft_wrap=True)


def flink_disposal(console: Console, r: FlinkDisposal) -> None:
    plan = r.result.plan
    verb = "would delete" if r.result.dry_run else "deleted"
    shared = f" and {_count(len(plan.delete_shared), 'shared file')}" if plan.delete_shared else ""
    console.print(f"{verb} {escape(plan.snapshot)} ({_count(len(plan.delete_files), 'file')}{shared}, "
                  f"{human_bytes(plan.bytes_to_free)})", soft_wrap=True)
    if r.result.dry_run:
        for f in r.files:
            console.print(f"  {escape(f)}", soft_wrap=True)
    for path, refs in plan.keep_shared:
        by = ", ".join(refs) or "a checkpoint that could not be read"
        console.print(f"  kept shared {escape(path)}: referenced by {escape(by)}", soft_wrap=True)
    for path in plan.keep_exclusive:
        console.print(f"  kept {escape(path)}: referenced by another checkpoint", soft_wrap=True)
    for path in plan.keep_external:
        console.print(f"  kept {escape(path)}: outside the snapshot and its job's shared/ directory", soft_wrap=True)
    for path in plan.missing:
        console.print(f"  [yellow]already missing[/] {escape(path)}", soft_wrap=True)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


def flink_relocation(console: Console, r: FlinkRelocation) -> None:
    console.print(f"rewrote {r.paths_changed} of {_count(r.paths, 'absolute path')} "
                  f"({_count(r.handles_changed, 'file handle')}) "
                  f"in {escape(r.source)}", soft_wrap=True)
    console.print(f"wrote {escape(r.output)} ({human_bytes(r.bytes)})" + (", replacing it" if r.overwritten else ""), soft_wrap=True)
    for old, new in r.examples:
        console.print(f"  {escape(old)} -> {escape(new)}", soft_wrap=True)
    for warning in r.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


def key_group_lookup(console: Console, r: KeyGroupLookup) -> None:
    if r.engine == "flink":
        console.print(f"key {escape(repr(r.value))} (Java {r.java_type}, hashCode {r.hash}, murmurHash {r.murmur_hash}) "
                      f"-> Flink key group {r.key_group} of {r.max_parallelism}")
    else:
        console.print(f"key {escape(repr(r.value))} ({r.key_serializer} bytes {r.key_bytes}, murmur3_32 {r.hash}) "
                      f"-> statekit key group {r.key_group} of {r.max_parallelism}")
    if r.subtask is not None and r.subtask_key_groups is not None:  # set together
        start, end = r.subtask_key_groups
        console.print(f"subtask {r.subtask} of {r.parallelism} (key groups {start}-{end})")


def flink_upgrade_report(console: Console, r: FlinkUpgradeReport) -> None:
    verdict = "[green]RESTORES[/]" if r.compatible else "[red]WILL NOT RESTORE[/]"
    console.print(f"{verdict} on Flink {escape(r.target)}: {escape(r.path)} (metadata v{r.metadata_version}, "
                  f"written by {r.written_by}; {_count(r.states_checked, 'state')} checked)", soft_wrap=True)
    for f in r.findings:
        label = "[yellow]unknown[/]" if not f.blocking else f"[red]{escape(f.kind)}[/]"
        console.print(f"  {label} {escape(f.operator)}/{escape(f.state)}: {escape(f.reason)}", soft_wrap=True)
        console.print(f"    way out: {escape(f.way_out)}", soft_wrap=True)


def compiled_plan_report(console: Console, r: CompiledPlanReport) -> None:
    verdict = "[green]COMPATIBLE[/]" if r.compatible else "[red]INCOMPATIBLE[/]"
    console.print(f"{verdict}: {escape(r.path)} against the compiled plan {escape(r.plan)} "
                  f"(Flink {escape(r.plan_flink_version)}; {_count(len(r.checks), 'stateful operator')})",
                  soft_wrap=True)
    colors = {"compatible": "green", "incompatible": "red", "unknown": "yellow"}
    for c in r.checks:
        node = f"node {c.node} {c.node_type}" if c.node is not None else "no node"
        operator = f"{c.operator_name or '?'} ({c.operator})" if c.operator else "no operator"
        console.print(f"  [{colors[c.verdict]}]{c.verdict}[/] {escape(node)} <-> {escape(operator)}", soft_wrap=True)
        for reason in c.reasons:
            console.print(f"    {escape(reason)}", soft_wrap=True)
